// nexus-bench group: shared-forward throughput, grouped vs serial, through nexusd and in-process.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace nexus::bench {

struct GroupOptions {
  std::string backbone = "small";
  std::vector<int> tenants = {1, 2, 4, 8};
  std::vector<int> batches = {1, 2, 4, 8};
  int rounds = 4;              // requests per tenant per cell (after one warm-up round)
  int repeats = 3;             // each cell measured this often; medians and spreads reported
  int replicas = 1;            // > 1: also a daemon with that many CPU replicas, against one
  bool json = false;
  std::string out;             // directory for group.csv and group.png (empty: a new /tmp dir)
  std::string csv;             // empty: OUT/group.csv
  std::string png;             // empty: OUT/group.png; "none": no plot
  std::string nexusd;
  std::string python;          // for the plot; empty: no plot
  std::string plot_script;
};

// In-process ceiling (group_inprocess.cpp, LibTorch): samples/s of one backbone pass over
// tenants*batch samples, and of `tenants` passes of `batch` samples.
struct InProcess {
  double grouped_sps = 0, serial_sps = 0;
};
InProcess inprocess_throughput(const std::string& backbone, int tenants, int batch, int rounds);
double backbone_flops_per_sample(const std::string& backbone);
double peak_gemm_flops();  // float32 GEMM measured now, same threads: best of 5

int run_group(const GroupOptions& options);

}  // namespace nexus::bench
