// nexus-bench group: shared-forward throughput, grouped vs serial, through nexusd and in-process.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace nexus::bench {

struct GroupOptions {
  std::string backbone = "small";
  std::string device = "auto";  // the daemon's and the in-process ceiling's: auto = cuda:0 where one is, else cpu
  std::string precision = "float32";  // [model] precision of both (and the GEMM rate's)
  std::vector<int> tenants = {1, 2, 4, 8};
  std::vector<int> batches = {1, 2, 4, 8};
  int rounds = 0;              // requests per tenant per cell (after a warm-up); 0: 4 on the CPU, 64 on a GPU
  int repeats = 3;             // each cell measured this often; medians and spreads reported
  int replicas = 1;            // > 1: also a daemon with that many replicas (--devices), against one
  int latency_requests = 200;  // batch-1 requests of one tenant, one at a time: p50/p99
  double utilization_s = 2;    // on a GPU: the largest tenant count's cells run this long more, its utilization read
  bool json = false;
  std::string out;             // directory for group.csv and group.png (empty: a new /tmp dir)
  std::string csv;             // empty: OUT/group.csv
  std::string png;             // empty: OUT/group.png; "none": no plot
  std::string nexusd;
  std::string python;          // for the plot; empty: no plot
  std::string plot_script;
};

// In-process ceiling (group_inprocess.cpp, LibTorch), on o.device at o.precision: samples/s of
// one backbone pass over tenants*batch samples, and of `tenants` passes of `batch` samples.
struct InProcess {
  double grouped_sps = 0, serial_sps = 0;
};
std::string resolve_device(const std::string& device);  // "auto" -> "cuda:0" or "cpu"; throws for no device
InProcess inprocess_throughput(const GroupOptions& o, int tenants, int batch);
double inprocess_batch1_p50_us(const GroupOptions& o, int passes);
double backbone_flops_per_sample(const std::string& backbone);
// GEMM FLOP/s on `device` at `precision` (bf16: bfloat16 operands; tf32: TF32 on a GPU), best of
// 5, measured now: float32 1024^3 on the CPU (same threads), 8192^3 on a GPU.
double peak_gemm_flops(const std::string& device, const std::string& precision);

int run_group(const GroupOptions& options);

}  // namespace nexus::bench
