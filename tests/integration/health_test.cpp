// The Health Manager, with roles broken on purpose (nexusd --inject-fault): an environment
// worker whose loop throws, a job loop that hangs past its heartbeat, an RL rollout loop that
// throws and then hangs, and the executor's loop that throws are restarted in place; the jobs
// finish and the sessions step on. An RL job whose simulator died is given up after its
// restarts and fails with the last error, while another tenant's job finishes.
#include <catch2/catch.hpp>
#include <signal.h>
#include <unistd.h>

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

namespace {

std::string health_lines(const std::string& socket) {
  std::string out;
  for (const auto& line : nexus::query_status(socket).health) out += line + "\n";
  return out;
}

}  // namespace

TEST_CASE("an RL job's rollout loop that throws, then hangs, and an executor that throws are restarted and the job finishes",
          "[integration][model][health]") {
  TempDir dir;
  std::ofstream(dir.path + "/nexusd.toml") << "[jobs]\nheartbeat_ms = 1000\n";
  Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn", "-c", dir.path + "/nexusd.toml",
                 "--state-dir", dir.path + "/state", "--inject-fault", "rl-rollout-throw", "--inject-fault",
                 "rl-rollout-hang", "--inject-fault", "executor-throw"});
  auto c = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "steady", .timeout = std::chrono::seconds(60)});
  // The executor lane that takes the first turn with work throws (the training lane: this
  // registration, which waits for its successor; or an inference lane's).
  c->register_tenant({.head = {.kind = "gaussian", .state_dim = 4, .action_dim = 2, .chunk = 1}});
  c->rl_start({.sessions = 4, .horizon = 16, .iterations = 4, .minibatch = 32});
  nexus::RlStatus s;
  REQUIRE(eventually([&] { return (s = c->rl_status()).state != "running"; }, std::chrono::seconds(120)));
  INFO(s.state << " " << s.error);
  CHECK(s.state == "done");
  CHECK(s.iterations == 4);
  CHECK(s.version == s.first_version + 4);
  const auto health = health_lines(daemon.socket());
  INFO(health);
  CHECK_THAT(health, Catch::Contains(": 1 restart(s), last: executor: injected fault"));
  // The first rollout loop threw; its successor hung past its 1 s heartbeat and was taken over
  // (on a loaded machine a slow step may add a restart of its own: at least 2).
  const auto rollout = health.find("-rollout: ");
  REQUIRE(rollout != std::string::npos);
  CHECK(std::stoi(health.substr(rollout + 10)) >= 2);
  CHECK(health.find("restart(s), last: missed its heartbeat", rollout) != std::string::npos);
  CHECK(nexus::query_status(daemon.socket()).pid == daemon.pid());
}

TEST_CASE("an RL job whose simulator died is given up after its restarts, failed with the last error while others go on",
          "[integration][model][health]") {
  TempDir dir;
  const std::string sim_socket = dir.path + "/sim.sock";
  const pid_t sim = spawn({NEXUS_TEST_EXTERNAL_ENV, "--socket", sim_socket}, {.stdout_path = dir.path + "/sim.out"});
  REQUIRE(eventually([&] { return ::access(sim_socket.c_str(), F_OK) == 0; }, std::chrono::seconds(10)));
  Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn", "--state-dir", dir.path + "/state",
                 "--external-env", "mysim=" + sim_socket});
  auto doomed = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "doomed", .timeout = std::chrono::seconds(60)});
  auto other = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "other", .timeout = std::chrono::seconds(60)});
  for (auto* c : {doomed.get(), other.get()})
    c->register_tenant({.head = {.kind = "gaussian", .state_dim = 4, .action_dim = 2, .chunk = 1}});
  doomed->rl_start({.task = "mysim:reach", .sessions = 2, .horizon = 8, .iterations = 100000, .minibatch = 16});
  REQUIRE(eventually([&] { return doomed->rl_status().env_steps > 0; }, std::chrono::seconds(60)));
  ::kill(sim, SIGKILL);
  REQUIRE(wait_exit(sim, std::chrono::seconds(10)).has_value());
  other->rl_start({.sessions = 4, .horizon = 16, .iterations = 3, .minibatch = 32});
  // Every restart finds the simulator gone: 5 restarts with back-off (0.1 s doubling), then given up.
  nexus::RlStatus s;
  REQUIRE(eventually([&] { return (s = doomed->rl_status()).state != "running"; }, std::chrono::seconds(60)));
  CHECK(s.state == "failed");
  CHECK_THAT(s.error, Catch::StartsWith("given up after 5 restarts; last: rollout: environment:"));
  const auto health = health_lines(daemon.socket());
  INFO(health);
  CHECK_THAT(health, Catch::Contains("-rollout: failed after 5 restart(s): rollout: environment:"));
  nexus::RlStatus o;
  REQUIRE(eventually([&] { return (o = other->rl_status()).state != "running"; }, std::chrono::seconds(120)));
  CHECK(o.state == "done");
  CHECK(o.iterations == 3);
  CHECK(nexus::query_status(daemon.socket()).pid == daemon.pid());
}
