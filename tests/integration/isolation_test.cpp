// A shared service that stays fair and isolated, through real processes: an offender's bad
// requests (token ids out of range, NaN actions, requests over the cost budget) are typed errors
// for it alone; weighted fair share holds for tenants that keep the queue busy; a hung external
// simulator fails only its own sessions while others step on.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "processes.hpp"
#include "tenant_run.hpp"

using namespace nexus::test;

namespace {

// Runs the tenants at once against one fresh daemon; each one's JSON report by name.
std::map<std::string, nlohmann::json> run_all(const std::vector<SftTenant>& tenants, std::vector<std::string> daemon_flags) {
  TempDir out;
  std::vector<std::string> args = {"--weights", tiny_weights_path(), "--log-level", "warn", "--state-dir", out.path + "/state"};
  args.insert(args.end(), daemon_flags.begin(), daemon_flags.end());
  Daemon daemon(args);
  auto reports = run_sft_tenants(daemon, tenants, 120, out);
  REQUIRE(nexus::query_status(daemon.socket()).pid == daemon.pid());  // it served on
  return reports;
}

}  // namespace

TEST_CASE("an offender's out-of-range tokens, NaN actions and over-budget requests change nobody's training",
          "[integration][model][isolation]") {
  const std::vector<SftTenant> honest = {{"alice", "mlp_chunk", 1, {}}, {"bob", "flow", 2, {}}, {"carol", "gaussian", 3, {}}};
  // 20 GFLOP: a 16-sample step costs about 2, the offender's 512-sample request about 65.
  const std::vector<std::string> flags = {"--max-request-gflop", "20"};
  const auto alone = run_all(honest, flags);
  auto with_offender = honest;
  with_offender.push_back({"mallory", "mlp_chunk", 4, {"--offend-every", "4", "--offense", "mixed"}});
  const auto shared = run_all(with_offender, flags);
  const auto& m = shared.at("mallory");
  INFO("mallory: " << m.dump().substr(0, 400));
  CHECK(m["bad_batches"] == 30);  // every 4th of 120 steps
  CHECK(m["refused"]["BadBatch"] == 20);    // NaN actions and token ids out of range
  CHECK(m["refused"]["OverBudget"] == 10);  // over the per-request budget
  for (const auto& t : honest) {
    const double worst = max_relative_difference(alone.at(t.name), shared.at(t.name));
    INFO(t.name << ": max relative loss difference " << worst);
    CHECK(worst <= 1e-4);  // the equivalence tolerance
  }
}

namespace {

// Compute-seconds by tenant from `nexusctl tenants --json`.
std::map<std::string, double> compute_by_tenant(const std::string& socket) {
  std::map<std::string, double> out;
  for (const auto& u : nexus::query_status(socket).usage) out[u.name] = u.compute_s();
  return out;
}

pid_t busy_trainer(const Daemon& d, const TempDir& dir, const std::string& name, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {NEXUS_TEST_SFT_TENANT, "--socket", d.socket(), "--tenant", name, "--steps", "1000000",
                                   "--batch", "32", "--pipeline", "4", "--report-every", "0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return spawn(argv, {.stdout_path = dir.path + "/" + name + ".out", .stderr_path = dir.path + "/" + name + ".err"});
}

// examples/external_env on `socket` with a fault option, once it accepts connections.
pid_t external_env(const TempDir& dir, const std::string& socket, const std::string& fault, const std::string& value) {
  const pid_t sim = spawn({NEXUS_TEST_EXTERNAL_ENV, "--socket", socket, fault, value}, {.stdout_path = dir.path + "/sim.out"});
  REQUIRE(eventually([&] { return ::access(socket.c_str(), F_OK) == 0; }, std::chrono::seconds(10)));
  return sim;
}

}  // namespace

TEST_CASE("weighted fair share: tenants weighted 1:2 that keep the queue busy get compute 1:2",
          "[integration][model][fairness]") {
  TempDir dir;
  std::ofstream(dir.path + "/nexusd.toml") << "[tenants.light]\nweight = 1\n[tenants.heavy]\nweight = 2\n";
  Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn", "-c", dir.path + "/nexusd.toml"});
  const pid_t light = busy_trainer(daemon, dir, "light"), heavy = busy_trainer(daemon, dir, "heavy");
  std::this_thread::sleep_for(std::chrono::seconds(4));  // both registered and busy
  REQUIRE(eventually([&] {
    const auto m = compute_by_tenant(daemon.socket());
    return m.count("light") && m.count("heavy");
  }, std::chrono::seconds(60)));
  const auto before = compute_by_tenant(daemon.socket());
  std::this_thread::sleep_for(std::chrono::seconds(20));
  const auto after = compute_by_tenant(daemon.socket());
  ::kill(light, SIGKILL), ::kill(heavy, SIGKILL);
  wait_exit(light, std::chrono::seconds(5)), wait_exit(heavy, std::chrono::seconds(5));
  const double l = after.at("light") - before.at("light"), h = after.at("heavy") - before.at("heavy");
  INFO("compute-seconds over 20 s: light " << l << ", heavy " << h << " (ratio " << h / l << ")");
  CHECK(l > 1.0);
  CHECK(h / l == Approx(2.0).epsilon(0.10));
}

TEST_CASE("a tenant back from 30 s idle neither starves the others nor is starved", "[integration][model][fairness]") {
  TempDir dir;
  Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn"});
  // steady trains throughout; returning trains 60 steps, idles 30 s (its slot stays), then trains on.
  const pid_t steady = busy_trainer(daemon, dir, "steady");
  const pid_t returning = busy_trainer(daemon, dir, "returning", {"--pause-after", "60", "--pause-s", "30"});
  const auto said = [&](const char* what) { return read_file(dir.path + "/returning.err").find(what) != std::string::npos; };
  REQUIRE(eventually([&] { return said("pausing"); }, std::chrono::seconds(60)));
  REQUIRE(eventually([&] { return said("resumed"); }, std::chrono::seconds(45)));
  std::this_thread::sleep_for(std::chrono::seconds(1));  // its pipeline full again
  const auto before = compute_by_tenant(daemon.socket());
  std::this_thread::sleep_for(std::chrono::seconds(10));
  const auto after = compute_by_tenant(daemon.socket());
  ::kill(steady, SIGKILL), ::kill(returning, SIGKILL);
  wait_exit(steady, std::chrono::seconds(5)), wait_exit(returning, std::chrono::seconds(5));
  const double s = after.at("steady") - before.at("steady"), r = after.at("returning") - before.at("returning");
  INFO("after the return, over 10 s: steady " << s << ", returning " << r << " compute-seconds");
  // Equal weights: an even split, give or take. Banked credit would have starved `steady`.
  CHECK(r / s > 0.6);
  CHECK(r / s < 1.6);
}

TEST_CASE("a hung external simulator fails its sessions after the timeout while other tenants step on",
          "[integration][model][env][isolation]") {
  TempDir dir;
  const std::string sim_socket = dir.path + "/sim.sock";
  const pid_t sim = external_env(dir, sim_socket, "--hang-after", "2");
  // The deadline of a 2-session exchange: 1.5 s + 2 x 0.25 s.
  std::ofstream(dir.path + "/nexusd.toml") << "[env]\nexternal_step_timeout_ms = 1500\nexternal_step_per_session_ms = 250\n";
  Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn", "-c", dir.path + "/nexusd.toml",
                 "--external-env", "mysim=" + sim_socket});
  nexus::ClientOptions o{.socket_path = daemon.socket(), .tenant = "alice", .timeout = std::chrono::seconds(30)};
  auto alice = nexus::Client::attach(o);
  o.tenant = "bob";
  auto bob = nexus::Client::attach(o);
  const auto ext = alice->env_open("mysim:reach", 2);
  const auto mine = bob->env_open("reach", 2);
  const std::int64_t h = ext.image_size;
  auto a_img = alice->alloc(nexus::DType::UInt8, {2, 1, h, h, 3}), a_st = alice->alloc(nexus::DType::Float32, {2, 4});
  auto b_img = bob->alloc(nexus::DType::UInt8, {2, 1, h, h, 3}), b_st = bob->alloc(nexus::DType::Float32, {2, 4});
  const std::vector<std::uint64_t> seeds{1, 2};
  const std::vector<float> act(4, 0.1f);
  REQUIRE(alice->env_reset(ext.ids, seeds, a_img, a_st).errors == std::vector<std::string>(2, ""));
  REQUIRE(bob->env_reset(mine.ids, seeds, b_img, b_st).errors == std::vector<std::string>(2, ""));
  // Bob steps in a loop while alice's simulator hangs (its 3rd step on): bob's steps go on.
  std::atomic<bool> hung_done{false};
  std::atomic<int> bob_steps{0};
  std::atomic<double> bob_worst_s{0};
  std::thread stepper([&] {
    while (!hung_done) {
      const auto t0 = std::chrono::steady_clock::now();
      auto r = bob->env_step(mine.ids, act, b_img, b_st);
      if (r.done[0] || r.done[1]) bob->env_reset(mine.ids, seeds, b_img, b_st);
      bob_worst_s = std::max<double>(bob_worst_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      ++bob_steps;
    }
  });
  REQUIRE(alice->env_step(ext.ids, act, a_img, a_st).errors == std::vector<std::string>(2, ""));
  const auto t0 = std::chrono::steady_clock::now();
  const auto hung = alice->env_step(ext.ids, act, a_img, a_st);  // the simulator stops answering here
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int steps_meanwhile = bob_steps;
  hung_done = true;
  stepper.join();
  ::kill(sim, SIGKILL);
  wait_exit(sim, std::chrono::seconds(5));
  INFO("alice waited " << waited << " s; bob stepped " << steps_meanwhile << " times meanwhile, worst step "
                       << bob_worst_s << " s");
  CHECK(hung.failed == std::vector<bool>{true, true});
  CHECK(hung.errors[0].find("external environment") != std::string::npos);
  CHECK(waited >= 1.9);
  CHECK(waited < 10);
  CHECK(steps_meanwhile >= 10);
  CHECK(bob_worst_s < 1.0);  // never waited behind alice's hung call
  CHECK(nexus::query_status(daemon.socket()).pid == daemon.pid());
}

// A simulator answers an exchange's sessions together, so a slow one needs time per session: an
// exchange's deadline is the step timeout plus a budget per session it names. Here a step of 4
// sessions takes 2 s, twice the step timeout: with no budget per session it fails the sessions;
// with 0.75 s a session (a 4 s deadline) they step on.
TEST_CASE("a slow external simulator gets the step timeout plus a budget per session in the exchange",
          "[integration][model][env][isolation]") {
  TempDir dir;
  const std::string sim_socket = dir.path + "/sim.sock";
  const pid_t sim = external_env(dir, sim_socket, "--slow-ms-per-session", "500");
  auto steps_with = [&](int per_session_ms) {
    const auto config = dir.path + "/nexusd-" + std::to_string(per_session_ms) + ".toml";
    std::ofstream(config) << "[env]\nexternal_step_timeout_ms = 1000\nexternal_step_per_session_ms = " << per_session_ms
                          << "\n";
    Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn", "-c", config, "--external-env",
                   "mysim=" + sim_socket});
    auto c = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "alice", .timeout = std::chrono::seconds(30)});
    const auto ext = c->env_open("mysim:reach", 4);
    const std::int64_t h = ext.image_size;
    auto img = c->alloc(nexus::DType::UInt8, {4, 1, h, h, 3}), st = c->alloc(nexus::DType::Float32, {4, 4});
    const std::vector<std::uint64_t> seeds{1, 2, 3, 4};
    const std::vector<float> act(8, 0.1f);
    REQUIRE(c->env_reset(ext.ids, seeds, img, st).errors == std::vector<std::string>(4, ""));
    const auto stepped = c->env_step(ext.ids, act, img, st);
    INFO("per session " << per_session_ms << " ms: " << stepped.errors[0]);
    CHECK(nexus::query_status(daemon.socket()).pid == daemon.pid());
    return stepped.failed == std::vector<bool>(4, false);
  };
  CHECK_FALSE(steps_with(0));  // 2 s against a 1 s deadline: the sessions fail
  CHECK(steps_with(750));      // a 4 s deadline
  ::kill(sim, SIGKILL);
  wait_exit(sim, std::chrono::seconds(5));
}

TEST_CASE("saturated inference does not starve training: a closed-loop SFT tenant keeps its floor",
          "[integration][model][fairness]") {
  TempDir dir;
  Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn"});
  // An inference-only tenant keeps 4 large predicts in flight: the Inference Queue is never empty.
  std::atomic<bool> done{false};
  std::thread flood([&] {
    auto c = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "flood", .timeout = std::chrono::seconds(60)});
    const auto bb = c->register_tenant({.head = {.kind = "mlp_chunk", .action_dim = 2, .chunk = 4}});
    auto images = c->alloc(nexus::DType::UInt8, {64, 1, bb.image_size, bb.image_size, 3});
    auto tokens = c->alloc(nexus::DType::Int32, {64, bb.max_tokens});
    auto mask = c->alloc(nexus::DType::UInt8, {64, bb.max_tokens});
    for (std::int64_t i = 0; i < 64; ++i) nexus::tokenize("reach the red ball", tokens, mask, i);
    std::deque<nexus::Future<nexus::Prediction>> in_flight;
    while (!done) {
      while (in_flight.size() < 4) in_flight.push_back(c->predict_async({&images, &tokens, &mask, nullptr}));
      in_flight.front().get();
      in_flight.pop_front();
    }
    while (!in_flight.empty()) in_flight.front().get(), in_flight.pop_front();
  });
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const pid_t t = spawn({NEXUS_TEST_SFT_TENANT, "--socket", daemon.socket(), "--tenant", "trainer", "--steps", "40",
                         "--report-every", "0"},
                        {.stdout_path = dir.path + "/trainer.json", .stderr_path = dir.path + "/trainer.err"});
  const auto rc = wait_exit(t, std::chrono::seconds(120));
  const auto s = nexus::query_status(daemon.socket());
  done = true;
  flood.join();
  INFO(read_file(dir.path + "/trainer.err"));
  REQUIRE(rc == 0);
  double flood_s = 0, trainer_s = 0;
  for (const auto& u : s.usage) (u.name == "flood" ? flood_s : trainer_s) += u.compute_s();
  INFO("compute-seconds: flood " << flood_s << ", trainer " << trainer_s);
  // The floor is 30% of the executor's recent time while training waits; a closed-loop tenant
  // leaves gaps, so it is held loosely: far from starved.
  CHECK(trainer_s > 0.1 * flood_s);
}
