// Crashes, with real processes: tenants SIGKILLed mid-SFT step and mid-RL rollout leave no fd,
// mapping or epoll registration behind and change nobody else's training; nexusd SIGKILLed
// mid-training and restarted lets every tenant resume from its last durable checkpoint, its loss
// continuing from there. NEXUS_CRASH_ITERATIONS sets the kills (CI: 6; scripts/crash-stress.sh: 100).
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "nexus/status.hpp"
#include "processes.hpp"
#include "tenant_run.hpp"

using namespace nexus::test;

namespace {

int iterations() {
  const char* v = std::getenv("NEXUS_CRASH_ITERATIONS");
  return v ? std::max(1, std::atoi(v)) : 6;
}

// The two honest tenants train through all the kills: their length grows with the kills (a kill
// takes a second or two), so that under the stress script's 100 they are still running at the last.
int honest_steps() { return std::max(150, 25 * iterations()); }

std::vector<std::string> honest_argv(const Daemon& d, const std::string& name, std::uint64_t seed) {
  return {NEXUS_TEST_SFT_TENANT, "--socket", d.socket(), "--tenant", name, "--seed", std::to_string(seed),
          "--steps", std::to_string(honest_steps()), "--report-every", "0", "--trajectory"};
}

}  // namespace

TEST_CASE("tenants SIGKILLed mid-step and mid-rollout leave nothing behind and change nobody's training",
          "[integration][model][crash]") {
  TempDir dir;
  auto run = [&](bool with_kills) {
    Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn"});
    // The control socket's listener and the rollout engines' (nothing else before a tenant comes).
    REQUIRE(eventually([&] { return count_fds(daemon.pid(), "socket:") == 2; }));
    const auto fds0 = count_fds(daemon.pid()), maps0 = count_mappings(daemon.pid(), "memfd:nexus-tenant");
    const auto epoll0 = count_epoll_registrations(daemon.pid());
    const pid_t a = spawn(honest_argv(daemon, "alice", 1), {.stdout_path = dir.path + "/alice.json"});
    const pid_t b = spawn(honest_argv(daemon, "bob", 2), {.stdout_path = dir.path + "/bob.json"});
    int killed = 0;
    if (with_kills) {
      std::mt19937 rng(11);
      for (int i = 0; i < iterations(); ++i) {
        const bool rl = i % 2 == 1;
        const std::string name = "victim-" + std::to_string(i);
        const pid_t v = rl ? spawn({NEXUS_TEST_RL_TENANT, "--socket", daemon.socket(), "--tenant", name, "--iterations", "1000",
                                    "--sessions", "8", "--horizon", "16", "--report-every", "0"},
                                   {.stdout_path = dir.path + "/victim.out", .stderr_path = dir.path + "/victim.err"})
                          : spawn({NEXUS_TEST_SFT_TENANT, "--socket", daemon.socket(), "--tenant", name, "--steps", "100000",
                                   "--pipeline", "4", "--report-every", "0"},
                                  {.stdout_path = dir.path + "/victim.out", .stderr_path = dir.path + "/victim.err"});
        // Let it get going (attached, a step or a rollout in flight), then kill it mid-flight.
        REQUIRE(eventually([&] {
          for (const auto& u : nexus::query_status(daemon.socket()).usage)
            if (u.name == name && (u.steps > 0 || u.predictions > 0)) return true;
          return false;
        }, std::chrono::seconds(60)));
        std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 300)(rng)));
        ::kill(v, SIGKILL);
        REQUIRE(wait_exit(v, std::chrono::seconds(5)) == 128 + SIGKILL);
        ++killed;
      }
    }
    const auto limit = std::chrono::seconds(240 + 2 * honest_steps() / 10);
    REQUIRE(wait_exit(a, limit) == 0);
    REQUIRE(wait_exit(b, limit) == 0);
    REQUIRE(daemon.wait_tenants(0, std::chrono::seconds(10)));
    CHECK(nexus::query_status(daemon.socket()).pid == daemon.pid());
    // Every victim's fds, segment mapping and epoll registrations are gone (RL jobs stop, their
    // sessions close; connections settle asynchronously).
    CHECK(eventually([&] { return count_fds(daemon.pid()) == fds0; }, std::chrono::seconds(10)));
    // A segment stays mapped while a request of its tenant is still in a turn or a queue (it is
    // dropped, unanswered, when picked): with two training lanes a victim's step may still run
    // when the honest tenants are done.
    CHECK(eventually([&] { return count_mappings(daemon.pid(), "memfd:nexus-tenant") == maps0; }, std::chrono::seconds(10)));
    CHECK(eventually([&] { return count_epoll_registrations(daemon.pid()) == epoll0; }, std::chrono::seconds(10)));
    CHECK(eventually([&] { return nexus::query_status(daemon.socket()).env_sessions == 0; }, std::chrono::seconds(10)));
    return std::pair{nlohmann::json::parse(last_line(dir.path + "/alice.json")),
                     nlohmann::json::parse(last_line(dir.path + "/bob.json"))};
  };
  const auto [a0, b0] = run(false);
  const auto [a1, b1] = run(true);
  for (const auto& [x, y] : {std::pair{a0, a1}, std::pair{b0, b1}}) {
    const double worst = max_relative_difference(x, y);
    INFO(x["tenant"] << ": max relative loss difference " << worst);
    CHECK(worst <= 1e-4);
  }
}

TEST_CASE("nexusd SIGKILLed mid-training and restarted: every tenant resumes from its last durable checkpoint",
          "[integration][model][crash]") {
  TempDir dir;
  const std::string state = dir.path + "/state";
  auto daemon = std::make_unique<Daemon>(std::vector<std::string>{"--state-dir", state, "--log-level", "warn"});
  std::vector<pid_t> pids;
  const std::vector<std::string> names = {"t0", "t1", "t2"};
  for (std::size_t i = 0; i < names.size(); ++i)
    pids.push_back(spawn({NEXUS_TEST_SFT_TENANT, "--socket", daemon->socket(), "--tenant", names[i], "--seed",
                          std::to_string(i + 1), "--steps", "100000", "--save-every", "10", "--report-every", "0",
                          "--trajectory"},
                         {.stdout_path = dir.path + "/" + names[i] + ".json", .stderr_path = dir.path + "/" + names[i] + ".err"}));
  // Every tenant past two checkpoints, then the crash.
  REQUIRE(eventually([&] {
    int ready = 0;
    for (const auto& u : nexus::query_status(daemon->socket()).usage) ready += u.steps >= 25;
    return ready == 3;
  }, std::chrono::seconds(120)));
  daemon->kill9();
  for (auto p : pids) CHECK(wait_exit(p, std::chrono::seconds(30)) == 2);  // DaemonGone, typed
  daemon = std::make_unique<Daemon>(std::vector<std::string>{"--state-dir", state, "--log-level", "warn"});
  for (std::size_t i = 0; i < names.size(); ++i) {
    // A fresh head on the same seed (same data, same initialisation): the loss a resume must beat.
    const pid_t f = spawn({NEXUS_TEST_SFT_TENANT, "--socket", daemon->socket(), "--tenant", "fresh-" + names[i], "--seed",
                           std::to_string(i + 1), "--steps", "1", "--report-every", "0"},
                          {.stdout_path = dir.path + "/fresh.json"});
    REQUIRE(wait_exit(f, std::chrono::seconds(120)) == 0);
    const double fresh = nlohmann::json::parse(last_line(dir.path + "/fresh.json"))["first_loss"].get<double>();
    const pid_t p = spawn({NEXUS_TEST_SFT_TENANT, "--socket", daemon->socket(), "--tenant", names[i], "--seed",
                           std::to_string(i + 1), "--resume", "auto", "--steps", "5", "--report-every", "0"},
                          {.stdout_path = dir.path + "/" + names[i] + "-resumed.json",
                           .stderr_path = dir.path + "/" + names[i] + "-resumed.err"});
    INFO(read_file(dir.path + "/" + names[i] + "-resumed.err"));
    REQUIRE(wait_exit(p, std::chrono::seconds(120)) == 0);
    const auto r = nlohmann::json::parse(last_line(dir.path + "/" + names[i] + "-resumed.json"));
    CHECK(r["resumed_step"].get<int>() >= 20);
    CHECK(r["resumed_step"].get<int>() % 10 == 0);
    // Its loss continues from where it was, well below a fresh head's.
    INFO("resumed at step " << r["resumed_step"] << ": loss " << r["first_loss"] << ", a fresh head's " << fresh);
    CHECK(r["first_loss"].get<double>() < 0.8 * fresh);
  }
}
