// The Health Manager, with roles broken on purpose (nexusd --inject-fault): an environment
// worker whose loop throws, and a job loop that hangs past its heartbeat, are restarted in
// place; the job finishes and the sessions step on.
#include <catch2/catch.hpp>

#include <fstream>
#include <thread>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "processes.hpp"
#include "tenant_run.hpp"

using namespace nexus::test;

TEST_CASE("a thrown environment worker and a hung job loop are restarted, and their work goes on",
          "[integration][model][health]") {
  TempDir dir;
  const std::string file = dir.path + "/reach.hdf5";
  REQUIRE(run_json({nexusctl_path(), "dataset", "record", "--task", "reach", "--episodes", "5", "--out", file}, dir,
                   "record").first == 0);
  std::ofstream(dir.path + "/nexusd.toml") << "[jobs]\nheartbeat_ms = 1000\n";
  Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn", "-c", dir.path + "/nexusd.toml",
                 "--inject-fault", "env-worker-throw", "--inject-fault", "job-hang"});
  auto c = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "patient", .timeout = std::chrono::seconds(60)});
  // The worker pool's first worker throws when it first finds work; the caller steps its own
  // parts meanwhile, and the worker is back for the next call.
  const auto envs = c->env_open("reach", 4);
  const std::int64_t h = envs.image_size;
  auto images = c->alloc(nexus::DType::UInt8, {4, 1, h, h, 3});
  auto state = c->alloc(nexus::DType::Float32, {4, 4});
  const std::vector<std::uint64_t> seeds{1, 2, 3, 4};
  const std::vector<float> act(8, 0.1f);
  REQUIRE(c->env_reset(envs.ids, seeds, images, state).errors == std::vector<std::string>(4, ""));
  for (int i = 0; i < 10; ++i) REQUIRE(c->env_step(envs.ids, act, images, state).errors == std::vector<std::string>(4, ""));
  // A job whose loop hangs past its 1 s heartbeat on its third step: restarted, it finishes.
  c->register_tenant({.head = {.kind = "mlp_chunk", .state_dim = 4, .action_dim = 2, .chunk = 4}});
  c->dataset_load("demos", file);
  const auto job = c->job_start({.kind = "sft", .dataset = "demos", .steps = 20, .batch = 8, .chunk = 4});
  nexus::JobInfo j;
  REQUIRE(eventually([&] { return (j = c->job(job)).state == "finished" || j.state == "failed"; }, std::chrono::seconds(60)));
  INFO(j.state << " " << j.error);
  CHECK(j.state == "finished");
  CHECK(j.done == 20);
  CHECK(c->slot_digest().step == 20);  // each step once: the hung loop, when it woke, stood down
  const auto s = nexus::query_status(daemon.socket());
  std::string health;
  for (const auto& line : s.health) health += line + "\n";
  INFO(health);
  CHECK(s.health_restarts >= 2);
  CHECK_THAT(health, Catch::Contains("env-worker-") && Catch::Contains("injected fault"));
  CHECK_THAT(health, Catch::Contains("job-") && Catch::Contains("missed its heartbeat"));
  CHECK(s.pid == daemon.pid());
}
