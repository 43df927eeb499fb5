// nexus-bench adapters: grouped per-tenant LoRA passes against one pass per tenant and against
// no adapters, in-process (adapters_bench.cpp).
#pragma once
#include <string>
#include <vector>

namespace nexus::bench {

struct AdaptersOptions {
  std::string backbone = "small";
  std::vector<int> tenants = {1, 2, 4, 8};
  int batch = 1, rank = 16, rounds = 8, repeats = 5;
  std::string device = "cpu";  // "cuda": the backbone, adapters and inputs there (times synchronised)
  bool json = false;
};

int run_adapters(const AdaptersOptions& options);

}  // namespace nexus::bench
