#include <catch2/catch.hpp>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "processes.hpp"

using namespace nexus::test;

TEST_CASE("nexus-bench group --json ends with its figures (medians, spreads, replicas, latency, the device's ceiling), "
          "and writes CSV and PNG into --out",
          "[integration][model][bench]") {
  TempDir out;
  const std::string csv = out.path + "/g/group.csv", png = out.path + "/g/group.png";
  const pid_t b = spawn({NEXUS_TEST_BENCH, "group", "--backbone", "tiny", "--tenants", "1,8", "--batch", "1",
                         "--rounds", "1", "--repeats", "2", "--replicas", "2", "--latency-requests", "20", "--out",
                         out.path + "/g", "--json"},
                        {.stdout_path = out.path + "/out", .stderr_path = out.path + "/err"});
  const auto exit_code = wait_exit(b, std::chrono::seconds(300));
  INFO(read_file(out.path + "/err"));  // read once the bench is done: INFO takes its text now
  REQUIRE(exit_code == 0);
  const auto j = nlohmann::json::parse(last_line(out.path + "/out"));
  for (const char* key : {"speedup_daemon", "speedup_inprocess", "flops_fraction_of_peak", "rss_ratio_8_vs_1",
                          "peak_gemm_gflops", "replica_speedup", "latency_batch1_p50_ms", "latency_batch1_p99_ms",
                          "inprocess_batch1_p50_ms", "best_daemon_sps", "daemon_share_of_inprocess_sps_best"}) {
    INFO(key);
    REQUIRE(j.contains(key));
    CHECK(j[key].get<double>() > 0);
  }
  for (const char* key : {"speedup_daemon_spread", "speedup_inprocess_spread", "replica_speedup_spread"}) {
    INFO(key);
    REQUIRE(j.contains(key));
    CHECK(j[key].get<double>() >= 0);
  }
  CHECK(j["repeats"] == 2);
  CHECK(j["latency_batch1_p99_ms"].get<double>() >= j["latency_batch1_p50_ms"].get<double>());
  // Without --device: cuda:0 where a GPU is (gpu-check sets NEXUS_TEST_CUDA), else the CPU.
  const auto device = j["device"].get<std::string>();
  CHECK((device == "cpu" || device == "cuda:0"));
  if (std::getenv("NEXUS_TEST_CUDA")) CHECK(device == "cuda:0");
  CHECK(j["precision"] == "float32");
  CHECK(j["replicas"] == 2);
  REQUIRE(j["cells"].size() == 2);
  for (const auto& cell : j["cells"]) {
    CHECK(cell["replica_speedup"].get<double>() > 0);
    CHECK(cell["daemon_share_of_inprocess_sps"].get<double>() > 0);
  }
  // One backbone copy: eight tenants cost the daemon little more memory than one.
  CHECK(j["rss_ratio_8_vs_1"].get<double>() < 1.2);
  CHECK(read_file(csv).find("tenants,batch") == 0);
  CHECK(read_file(png).substr(1, 3) == "PNG");
}

TEST_CASE("nexus-bench group runs at the precision it is given and refuses a device that is none",
          "[integration][model][bench][precision]") {
  TempDir out;
  const pid_t b = spawn({NEXUS_TEST_BENCH, "group", "--backbone", "tiny", "--tenants", "2", "--batch", "1", "--rounds", "1",
                         "--repeats", "1", "--latency-requests", "10", "--precision", "bf16", "--device", "cpu", "--png",
                         "none", "--out", out.path + "/g", "--json"},
                        {.stdout_path = out.path + "/out", .stderr_path = out.path + "/err"});
  const auto exit_code = wait_exit(b, std::chrono::seconds(300));
  INFO(read_file(out.path + "/err"));  // read once the bench is done: INFO takes its text now
  REQUIRE(exit_code == 0);
  const auto j = nlohmann::json::parse(last_line(out.path + "/out"));
  CHECK(j["precision"] == "bf16");
  CHECK(j["device"] == "cpu");
  CHECK(j["cells"][0]["daemon_grouped_sps"].get<double>() > 0);
  const pid_t bad = spawn({NEXUS_TEST_BENCH, "group", "--device", "tpu:0", "--out", out.path + "/h"},
                          {.stdout_path = out.path + "/bad-out", .stderr_path = out.path + "/bad-err"});
  CHECK(wait_exit(bad, std::chrono::seconds(60)) != 0);
  CHECK(read_file(out.path + "/bad-err").find("tpu:0") != std::string::npos);
}

TEST_CASE("nexus-bench env --json ends with its figures", "[integration][model][bench][sim]") {
  TempDir out;
  const pid_t b = spawn({NEXUS_TEST_BENCH, "env", "--tenants", "1,2", "--sessions", "2", "--steps", "3", "--sim-steps",
                         "50", "--rl-iterations", "1", "--engine-sessions", "4", "--engine-steps", "3", "--json"},
                        {.stdout_path = out.path + "/out", .stderr_path = out.path + "/err"});
  const auto exit_code = wait_exit(b, std::chrono::seconds(300));
  INFO(read_file(out.path + "/err"));  // read once the bench is done: INFO takes its text now
  REQUIRE(exit_code == 0);
  const auto j = nlohmann::json::parse(last_line(out.path + "/out"));
  for (const char* key : {"reach_steps_per_s_per_core", "push_steps_per_s_per_core", "rollout_speedup_1",
                          "rollout_speedup_2", "rl_job_speedup_1", "rl_job_speedup_2", "engines_two_vs_one_reach",
                          "engines_one_vs_pool_push"}) {
    INFO(key);
    REQUIRE(j.contains(key));
    CHECK(j[key].get<double>() > 0);
  }
  CHECK(j["rollout"].size() == 2);
}

TEST_CASE("nexus-bench fairness: weights hold, inference waits behind one training turn at most, and a small "
          "batch beside a big one gets a share it can feel (loosely)",
          "[integration][model][bench][fairness]") {
  TempDir out;
  const pid_t b = spawn({NEXUS_TEST_BENCH, "fairness", "--seconds", "6", "--shared-seconds", "10", "--json"},
                        {.stdout_path = out.path + "/out", .stderr_path = out.path + "/err"});
  const auto exit_code = wait_exit(b, std::chrono::seconds(300));
  // Read once the bench is done: INFO takes its text now.
  INFO(read_file(out.path + "/err") << read_file(out.path + "/out"));
  REQUIRE(exit_code == 0);
  const auto j = nlohmann::json::parse(last_line(out.path + "/out"));
  CHECK(j["weighted_ratio"].get<double>() == Approx(2.0).epsilon(0.2));
  // The bound is idle p99 + the longest training turn; a shared 2-core CI machine also
  // schedules the trainers' own processes beside the daemon, so it is asserted with room.
  const double bound = j["idle_p99_ms"].get<double>() + j["longest_training_turn_ms"].get<double>();
  CHECK(j["loaded_p99_ms"].get<double>() <= 2 * bound + 50);
  CHECK(j["longest_training_turn_ms"].get<double>() > 0);
  // Batch 4 beside batch 128, equal weights, closed loops: with steps kept whole the small tenant
  // kept about 6% of its alone rate; bounded turns give it 0.4-0.5 (docs/design/service.md).
  // Asserted loosely: a 2-core CI machine runs both trainers' processes beside the daemon.
  CHECK(j["turns_small_share"].get<double>() > 0.15);
  CHECK(j["turns_small_share"].get<double>() > j["whole_small_share"].get<double>());
  CHECK(j["turns_weighted_small_share"].get<double>() > 0.15);
  CHECK(j["turns_big_weighted_big_share"].get<double>() > 0.15);
  // Weights move a closed-loop pair (turns cut by weight, the tenant ahead waits): the small
  // tenant's fraction of the pair's shares weighted 2 is larger than with the big one weighted 2
  // (measured with two training lanes 0.70-0.71 against 0.30-0.31, docs/design/service.md).
  CHECK(j["turns_weighted_small_fraction"].get<double>() > 1 - j["turns_big_weighted_big_fraction"].get<double>());
  // In nexusd's own measure (compute-seconds charged), the fair share holds for closed loops
  // too: equal at equal weights, 2:1 when the big tenant is weighted 2 (measured 1.00 and 2.00;
  // the virtual-time rule removed, the second reads about 1).
  CHECK(j["turns_equal_charged_ratio"].get<double>() == Approx(1.0).epsilon(0.5));
  CHECK(j["turns_big_weighted_charged_ratio"].get<double>() > 1.4);
  // And when the small tenant, which can take more only if the lane waits for its next step, is
  // weighted 2: measured 2.00-2.01 in three runs; 1.04-1.05 with a free training lane waiting for
  // nobody (before sched::wait_for_expected).
  CHECK(j["turns_weighted_charged_ratio"].get<double>() > 1.4);
}

TEST_CASE("nexus-bench workload --json compares shared and isolated runs and writes CSV and PNG",
          "[integration][model][bench][workload]") {
  TempDir out;
  const pid_t b = spawn({NEXUS_TEST_BENCH, "workload", "--scale", "0.1", "--out", out.path + "/w", "--json"},
                        {.stdout_path = out.path + "/out", .stderr_path = out.path + "/err"});
  const auto exit_code = wait_exit(b, std::chrono::seconds(600));
  INFO(read_file(out.path + "/err"));  // read once the bench is done: INFO takes its text now
  REQUIRE(exit_code == 0);
  const auto j = nlohmann::json::parse(last_line(out.path + "/out"));
  for (const char* key : {"compute_time_reduction", "train_util_isolated", "train_util_shared", "infer_util_isolated",
                          "infer_util_shared", "fairness_error"}) {
    INFO(key);
    REQUIRE(j.contains(key));
  }
  CHECK(j["shared_s"].get<double>() > 0);
  CHECK(j["isolated_s"].get<double>() > j["shared_s"].get<double>() * 0.5);
  // The machine's ceiling comes from CPU time really measured: the runs computed (a daemon
  // and its tenants busy at least a tenth of the time), and no more than every core all along.
  for (const char* mode : {"isolated", "shared"}) {
    INFO(mode);
    const double util = j[std::string("cpu_util_") + mode].get<double>();
    CHECK(util > 0.1);
    CHECK(util <= 1.02);  // clock-tick rounding
  }
  CHECK(j["reduction_ceiling"].get<double>() == Approx(1 - j["cpu_util_isolated"].get<double>()));
  CHECK(read_file(out.path + "/w/workload.csv").find("mode,tenant") == 0);
  CHECK(read_file(out.path + "/w/timeline.png").substr(1, 3) == "PNG");
  // The second scenario, measured in the same run: the cache off reads nothing from it; on, the
  // later epochs hit it and the backbone ran fewer samples than were drawn; shared, the two
  // tenants encoded fewer than on their own; bounded, it stayed within its bound.
  const auto& c = j["sft_cache"];
  CHECK(c["off"]["hits"].get<double>() == 0);
  CHECK(c["off"]["backbone_samples"] == c["off"]["drawn"]);
  CHECK(c["on"]["epoch_hit_rate"].back().get<double>() > 0.5);
  CHECK(c["on"]["backbone_samples"].get<double>() < c["on"]["drawn"].get<double>());
  CHECK(c["shared"]["backbone_samples"].get<double>() < c["on"]["backbone_samples"].get<double>());
  CHECK(c["bounded"]["peak_bytes"].get<double>() <= c["bounded"]["bound_bytes"].get<double>());
  CHECK(c["cached_epoch_speedup"].get<double>() > 0);
}

TEST_CASE("nexus-bench adapters --json ends with its figures, grouped against a pass per tenant and none",
          "[integration][model][bench][adapters]") {
  TempDir out;
  const pid_t b = spawn({NEXUS_TEST_BENCH, "adapters", "--backbone", "tiny", "--tenants", "1,2", "--rank", "4",
                         "--rounds", "1", "--repeats", "1", "--json"},
                        {.stdout_path = out.path + "/out", .stderr_path = out.path + "/err"});
  const auto exit_code = wait_exit(b, std::chrono::seconds(300));
  INFO(read_file(out.path + "/err"));  // read once the bench is done: INFO takes its text now
  REQUIRE(exit_code == 0);
  const auto j = nlohmann::json::parse(last_line(out.path + "/out"));
  for (const char* key : {"infer.T1.grouped_over_serial_speedup", "infer.T2.grouped_over_serial_speedup",
                          "train.T2.grouped_over_serial_speedup", "infer.T2.plain_grouped_over_serial_speedup",
                          "adapter_fraction_of_backbone"}) {
    INFO(key);
    REQUIRE(j.contains(key));
    CHECK(j[key].get<double>() > 0);
  }
  REQUIRE(j.contains("infer.T2.adapter_overhead"));
  // A rank-4 adapter on tiny's 2 blocks x 6 projections: 4 x (4 x 256 + 2 x 640) per block.
  CHECK(j["adapter_bytes"] == 2 * 4 * (4 * 256 + 2 * 640) * 4);
  CHECK(j["rank"] == 4);
}
