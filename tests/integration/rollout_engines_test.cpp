// Rollout engines (nexus-rollout) through a real nexusd: a PPO job runs on while engines attach,
// one drains and one is SIGKILLed; an engine that sends garbage or hangs fails only its own
// sessions (truncated, then moved) and is killed; a lab member's own engine never receives
// another user's sessions; registrations that lie or say nothing are refused; nexusctl scale
// rollout N drains engines and starts nexusd's own.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <thread>
#include <tuple>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "attach.hpp"
#include "processes.hpp"
#include "tenant_run.hpp"

using namespace nexus::test;

namespace {

std::unique_ptr<nexus::Client> attach(const Daemon& d, const std::string& tenant) {
  return attach_tenant(d, tenant, std::chrono::seconds(120));
}

std::string rollout_socket(const Daemon& d) { return d.socket().substr(0, d.socket().rfind('/')) + "/rollout.sock"; }

// An engine process; its output goes to DIR/NAME.out and .err.
pid_t start_engine(const Daemon& d, const TempDir& dir, const std::string& name, std::vector<std::string> extra = {},
                   SpawnOptions options = {}, const std::string& binary = NEXUS_TEST_ROLLOUT) {
  std::vector<std::string> argv{binary, "-s", rollout_socket(d), "-n", name};
  argv.insert(argv.end(), extra.begin(), extra.end());
  options.stdout_path = dir.path + "/" + name + ".out";
  options.stderr_path = dir.path + "/" + name + ".err";
  return spawn(argv, options);
}

std::optional<nexus::EngineStatus> engine_named(const Daemon& d, const std::string& name) {
  for (const auto& e : nexus::query_status(d.socket()).engines)
    if (e.name == name) return e;
  return std::nullopt;
}

// A tenant's reach sessions with their observation tensors, reset with seeds 1..n.
struct Sessions {
  std::vector<std::uint64_t> ids;
  nexus::Tensor images, state;
  nexus::EnvStepResult last;
};
Sessions open_sessions(nexus::Client& c, int n) {
  const auto s = c.env_open("reach", n);
  const std::int64_t h = s.image_size;
  Sessions out{s.ids, c.alloc(nexus::DType::UInt8, {n, 1, h, h, 3}), c.alloc(nexus::DType::Float32, {n, 4}), {}};
  std::vector<std::uint64_t> seeds;
  for (int i = 1; i <= n; ++i) seeds.push_back(static_cast<std::uint64_t>(i));
  out.last = c.env_reset(out.ids, seeds, out.images, out.state);
  return out;
}
// One step of every session (small actions); the finished ones are reset. The step's result.
// Throws on a reset's error (no Catch assertion: the neighbour calls this from its own thread).
nexus::EnvStepResult step_all(nexus::Client& c, Sessions& s) {
  const std::vector<float> actions(s.ids.size() * 2, 0.1f);
  s.last = c.env_step(s.ids, actions, s.images, s.state);
  std::vector<std::uint64_t> ended, seeds;
  for (std::size_t i = 0; i < s.ids.size(); ++i)
    if (s.last.done[i]) ended.push_back(s.ids[i]), seeds.push_back(7 + i);
  if (!ended.empty()) {
    const auto h = s.images.shape()[2];
    auto img = c.alloc(nexus::DType::UInt8, {static_cast<std::int64_t>(ended.size()), 1, h, h, 3});
    auto st = c.alloc(nexus::DType::Float32, {static_cast<std::int64_t>(ended.size()), 4});
    const auto r = c.env_reset(ended, seeds, img, st);
    for (const auto& e : r.errors)
      if (!e.empty()) throw std::runtime_error("reset: " + e);
  }
  return s.last;
}

// Polls `pred` every 100 ms (each poll is a request to nexusd) until it holds or `timeout` passes.
template <class Pred>
bool wait_for(Pred pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

}  // namespace

TEST_CASE("a PPO job runs on while rollout engines attach, one drains and one is SIGKILLed, and its neighbour sees no error",
          "[integration][model][rollout]") {
  TempDir dir;
  Daemon daemon({"--weights", tiny_weights_path(), "--state-dir", dir.path + "/state", "--log-level", "info"});
  const pid_t a = start_engine(daemon, dir, "engine-a", {"-c", "8"});
  REQUIRE(wait_for([&] { return engine_named(daemon, "engine-a").has_value(); }, std::chrono::seconds(30)));

  // The neighbour steps its own sessions all along and must never see an error.
  std::atomic<bool> running{true};
  std::atomic<int> neighbour_steps{0}, neighbour_errors{0};
  std::string neighbour_failure;
  auto bob = attach(daemon, "bob");
  std::thread neighbour;
  struct Join {  // a failed REQUIRE below must not leave the thread joinable (std::terminate)
    std::atomic<bool>& running;
    std::thread& t;
    ~Join() {
      running = false;
      if (t.joinable()) t.join();
    }
  } join{running, neighbour};
  neighbour = std::thread([&] {
    try {
      auto s = open_sessions(*bob, 2);
      while (running) {
        const auto r = step_all(*bob, s);
        for (const auto& e : r.errors) neighbour_errors += !e.empty();
        ++neighbour_steps;
      }
    } catch (const std::exception& e) {
      neighbour_failure = e.what();
      ++neighbour_errors;
    }
  });

  auto carol = attach(daemon, "carol");
  nexus::TenantSpec spec;
  spec.head = {.kind = "gaussian", .state_dim = 4, .action_dim = 2, .chunk = 1};
  carol->register_tenant(spec);
  const int updates = 120;  // long enough to outlast the attach, drain and kill below on a busy machine
  carol->rl_start({.task = "reach", .sessions = 8, .horizon = 16, .iterations = updates});
  const auto steps_on = [&](const std::string& engine) {
    const auto s = carol->rl_status();
    const auto it = s.engine_steps.find(engine);
    return it == s.engine_steps.end() ? std::uint64_t{0} : it->second;
  };
  REQUIRE(wait_for([&] { return steps_on("engine-a") > 0; }, std::chrono::seconds(120)));

  // A second engine takes sessions from the first at their next episodes.
  const pid_t b = start_engine(daemon, dir, "engine-b", {"-c", "16"});
  REQUIRE(wait_for([&] { return steps_on("engine-b") > 0; }, std::chrono::seconds(120)));
  CHECK(carol->rl_status().state == "running");

  // Drained: its sessions move to engine-b at their next reset, then nexusd lets it go.
  ::kill(a, SIGTERM);
  const auto a_exit = wait_exit(a, std::chrono::seconds(120));
  INFO(read_file(dir.path + "/engine-a.out") << read_file(dir.path + "/engine-a.err"));
  CHECK(a_exit == 0);
  CHECK_THAT(read_file(dir.path + "/engine-a.out"), Catch::Contains("drained: nexusd released this engine"));
  CHECK(wait_for([&] { return !engine_named(daemon, "engine-a").has_value(); }, std::chrono::seconds(10)));
  REQUIRE(wait_for([&] { return engine_named(daemon, "engine-b").value_or(nexus::EngineStatus{}).sessions >= 8; },
                     std::chrono::seconds(60)));

  // Killed mid-episode: its sessions' episodes end truncated, and they go on in nexusd.
  const auto before_kill = carol->rl_status();
  REQUIRE(before_kill.state == "running");
  ::kill(b, SIGKILL);
  CHECK(wait_exit(b, std::chrono::seconds(30)) == 128 + SIGKILL);
  REQUIRE(wait_for([&] { return carol->rl_status().state != "running"; }, std::chrono::seconds(600)));
  running = false;
  neighbour.join();

  const auto s = carol->rl_status();
  INFO(read_file(daemon.log_path()));
  CHECK(s.state == "done");
  CHECK(s.error.empty());
  CHECK(s.iterations == updates);
  CHECK(s.version == s.first_version + updates);  // every update published: none lost
  CHECK(s.records_dropped == 0);
  CHECK(std::isfinite(s.policy_loss));
  CHECK(std::isfinite(s.value_loss));
  CHECK(s.engine_steps.at("engine-a") > 0);
  CHECK(s.engine_steps.at("engine-b") > 0);
  CHECK(s.engine_steps.at("") > 0);          // after engine-b died: in nexusd
  CHECK(s.interrupted_episodes >= 1);        // the episodes engine-b was stepping when it died
  std::uint64_t total = 0;
  for (const auto& [engine, n] : s.engine_steps) total += n;
  // Every step is counted where it ran; env_steps leaves out a last step taken as the job ended.
  CHECK(total >= s.env_steps);
  CHECK(total <= s.env_steps + 8);
  INFO("neighbour: " << neighbour_failure);
  CHECK(neighbour_errors == 0);
  CHECK(neighbour_steps > 10);
  CHECK(wait_for([&] { return nexus::query_status(daemon.socket()).engines.empty(); }, std::chrono::seconds(10)));
  CHECK(nexus::query_status(daemon.socket()).pid == daemon.pid());
}

TEST_CASE("a rollout engine that sends garbage or hangs fails only its own sessions, truncated, and is killed",
          "[integration][model][rollout]") {
  TempDir dir;
  std::ofstream(dir.path + "/nexusd.toml") << "[env]\nexternal_step_timeout_ms = 2000\n";
  Daemon daemon({"--weights", tiny_weights_path(), "--state-dir", dir.path + "/state", "--log-level", "info", "-c",
                 dir.path + "/nexusd.toml"});
  auto alice = attach(daemon, "alice");
  auto bob = attach(daemon, "bob");

  for (const std::string fault : {"--garbage-after", "--hang-after"}) {
    INFO(fault);
    const std::string name = fault == "--garbage-after" ? "liar" : "sleeper";
    const pid_t e = start_engine(daemon, dir, name, {"-c", "2", fault, "6"});
    REQUIRE(wait_for([&] { return engine_named(daemon, name).has_value(); }, std::chrono::seconds(30)));
    auto mine = open_sessions(*alice, 2);   // both on the engine (it has room for two)
    auto theirs = open_sessions(*bob, 1);   // it is full: in nexusd
    CHECK(mine.last.engines == std::vector<std::string>{name, name});
    CHECK(theirs.last.engines == std::vector<std::string>{""});
    bool cut = false;
    for (int k = 0; k < 10 && !cut; ++k) {
      const auto r = step_all(*alice, mine);
      CHECK(r.errors == std::vector<std::string>(2, ""));  // a lost engine is not the session's error
      CHECK(r.failed == std::vector<bool>(2, false));
      cut = !r.interrupted[0].empty();
      if (cut) {
        CHECK_FALSE(r.interrupted[1].empty());  // the engine is failed: its other session too
        CHECK(r.done == std::vector<bool>(2, true));
        CHECK(r.truncated == std::vector<bool>(2, true));
      }
      CHECK(step_all(*bob, theirs).errors[0].empty());
    }
    CHECK(cut);
    CHECK(wait_exit(e, std::chrono::seconds(30)) == 128 + SIGKILL);  // nexusd killed its own user's liar
    CHECK(wait_for([&] { return !engine_named(daemon, name).has_value(); }, std::chrono::seconds(10)));
    // step_all reset them: they go on in nexusd.
    const auto r = step_all(*alice, mine);
    CHECK(r.errors == std::vector<std::string>(2, ""));
    CHECK(r.engines == std::vector<std::string>{"", ""});
    CHECK(r.interrupted == std::vector<std::string>(2, ""));
    alice->env_close(mine.ids);
    bob->env_close(theirs.ids);
  }
  CHECK(nexus::query_status(daemon.socket()).pid == daemon.pid());
}

TEST_CASE("a lab member's own rollout engine serves only that member's tenants, and bad registrations are refused",
          "[integration][model][rollout]") {
  const auto alice = ensure_test_user("nexus-test-alice");
  const auto mallory = ensure_test_user("nexus-test-mallory");
  if (!alice || !mallory) FAIL("this test needs root to create users; run the suite as root");
  TempDir dir;
  Daemon daemon({"--weights", tiny_weights_path(), "--state-dir", dir.path + "/state", "--log-level", "info"});
  const std::string engine = executable_copy(NEXUS_TEST_ROLLOUT, dir), rl = executable_copy(NEXUS_TEST_RL_TENANT, dir);

  // A connection that never speaks holds up no one.
  const int silent = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, rollout_socket(daemon).c_str());
  REQUIRE(::connect(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);

  const pid_t own = start_engine(daemon, dir, "alices", {"-c", "8"}, {.uid = alice->uid, .gid = alice->gid}, engine);
  REQUIRE(wait_for([&] { return engine_named(daemon, "alices").has_value(); }, std::chrono::seconds(30)));
  const auto e = *engine_named(daemon, "alices");
  CHECK_FALSE(e.shared);
  CHECK(e.uid == alice->uid);

  // Lies and nonsense: refused with the reason (exit 2), nothing attached.
  const auto refused = [&](const std::string& tag, const std::vector<std::string>& args, const std::string& reason) {
    std::vector<std::string> argv{NEXUS_TEST_ROLLOUT, "-s", rollout_socket(daemon)};
    argv.insert(argv.end(), args.begin(), args.end());
    const pid_t p = spawn(argv, {.stderr_path = dir.path + "/" + tag + ".err"});
    INFO(tag);
    CHECK(wait_exit(p, std::chrono::seconds(30)) == 2);
    CHECK_THAT(read_file(dir.path + "/" + tag + ".err"), Catch::Contains(reason));
  };
  refused("unknown-task", {"-n", "x", "--tasks", "fly"}, "built-in tasks");
  refused("bad-name", {"-n", "../x"}, "its name must be");
  CHECK(nexus::query_status(daemon.socket()).engines.size() == 1);

  auto as = [&](const TestUser& u, const std::string& tenant) {
    const pid_t p = spawn({rl, "--socket", daemon.socket(), "--tenant", tenant, "--iterations", "2", "--sessions", "4",
                           "--horizon", "8"},
                          {.stdout_path = dir.path + "/" + tenant + ".out", .stderr_path = dir.path + "/" + tenant + ".err",
                           .uid = u.uid, .gid = u.gid});
    const int rc = wait_exit(p, std::chrono::seconds(300)).value_or(-1);
    INFO(read_file(dir.path + "/" + tenant + ".err"));
    CHECK(rc == 0);
    return nlohmann::json::parse(last_line(dir.path + "/" + tenant + ".out"), nullptr, false);
  };
  const auto theirs = as(*mallory, "mallorys-job");
  INFO(theirs.dump());
  CHECK(theirs["engine_steps"].size() == 1);
  CHECK(theirs["engine_steps"][""].get<int>() > 0);  // in nexusd: never on alice's engine
  CHECK(engine_named(daemon, "alices")->steps == 0);
  // The daemon's own user's tenants (root here) do not get it either.
  auto root_tenant = attach(daemon, "roots");
  auto s = open_sessions(*root_tenant, 2);
  CHECK(step_all(*root_tenant, s).engines == std::vector<std::string>{"", ""});
  CHECK(engine_named(daemon, "alices")->steps == 0);

  const auto hers = as(*alice, "alices-job");
  INFO(hers.dump());
  CHECK(hers["engine_steps"]["alices"].get<int>() > 0);
  // Every step the job counted ran on her engine. The engine may have done one step more of each
  // of the job's 4 sessions: the rollout loop's exchange in flight when the job reached its last
  // iteration, which the status rl_tenant read as the job ended did not count yet (the loop sees
  // the stop after it; seen under load: 83 against 80).
  const auto engine_steps = engine_named(daemon, "alices")->steps;
  const auto job_steps = hers["engine_steps"]["alices"].get<std::uint64_t>();
  CHECK(engine_steps >= job_steps);
  CHECK(engine_steps <= job_steps + 4);

  // One user's own engines are bounded (4 by default): the fifth is refused, saying why.
  std::vector<pid_t> more;
  for (int k = 2; k <= 4; ++k)
    more.push_back(start_engine(daemon, dir, "alices-" + std::to_string(k), {}, {.uid = alice->uid, .gid = alice->gid},
                                engine));
  REQUIRE(wait_for([&] { return nexus::query_status(daemon.socket()).engines.size() == 4; }, std::chrono::seconds(30)));
  const pid_t fifth = start_engine(daemon, dir, "alices-5", {}, {.uid = alice->uid, .gid = alice->gid}, engine);
  CHECK(wait_exit(fifth, std::chrono::seconds(30)) == 2);
  CHECK_THAT(read_file(dir.path + "/alices-5.err"), Catch::Contains("engines of their own"));
  ::close(silent);
  more.push_back(own);
  for (pid_t p : more) ::kill(p, SIGTERM);
  for (pid_t p : more) CHECK(wait_exit(p, std::chrono::seconds(60)) == 0);  // drained: nothing was left on them
}

TEST_CASE("nexusctl scale rollout N drains the least busy engines down to N and starts nexusd's own up to N",
          "[integration][model][rollout]") {
  const auto mallory = ensure_test_user("nexus-test-mallory");
  if (!mallory) FAIL("this test needs root to create users; run the suite as root");
  TempDir dir;
  Daemon daemon({"--weights", tiny_weights_path(), "--state-dir", dir.path + "/state", "--log-level", "info"});
  const std::string ctl = executable_copy(nexusctl_path(), dir);
  int calls = 0;
  const auto scale = [&](const std::vector<std::string>& args, std::optional<TestUser> as = std::nullopt) {
    const std::string tag = dir.path + "/scale-" + std::to_string(++calls);
    std::vector<std::string> argv{ctl, "-s", daemon.socket(), "scale"};
    argv.insert(argv.end(), args.begin(), args.end());
    SpawnOptions o{.stdout_path = tag + ".out", .stderr_path = tag + ".err"};
    if (as) o.uid = as->uid, o.gid = as->gid;
    const int rc = wait_exit(spawn(argv, o), std::chrono::seconds(30)).value_or(-1);
    return std::pair{rc, read_file(tag + ".out") + read_file(tag + ".err")};
  };
  const auto engines = [&] { return nexus::query_status(daemon.socket()).engines; };

  const pid_t busy = start_engine(daemon, dir, "busy", {"-c", "8"});
  REQUIRE(wait_for([&] { return engine_named(daemon, "busy").has_value(); }, std::chrono::seconds(30)));
  auto alice = attach(daemon, "alice");
  auto s = open_sessions(*alice, 2);
  REQUIRE(s.last.engines == std::vector<std::string>{"busy", "busy"});
  const pid_t idle = start_engine(daemon, dir, "idle", {"-c", "8"});
  REQUIRE(wait_for([&] { return engine_named(daemon, "idle").has_value(); }, std::chrono::seconds(30)));

  // Only root or nexusd's own user; only what can be scaled.
  auto [rc, out] = scale({"rollout", "0"}, *mallory);
  CHECK(rc != 0);
  CHECK_THAT(out, Catch::Contains("only root or nexusd's own user"));
  std::tie(rc, out) = scale({"infer", "2"});
  CHECK(rc != 0);
  CHECK_THAT(out, Catch::Contains("not built"));
  CHECK(engines().size() == 2);

  // Down to 1: the idle one drains and leaves at once; the busy one keeps its sessions.
  std::tie(rc, out) = scale({"rollout", "1"});
  INFO(out);
  CHECK(rc == 0);
  CHECK_THAT(out, Catch::Contains("rollout: 2 -> 1"));
  CHECK(wait_exit(idle, std::chrono::seconds(30)) == 0);
  CHECK_THAT(read_file(dir.path + "/idle.out"), Catch::Contains("drained"));
  CHECK(engine_named(daemon, "busy").value_or(nexus::EngineStatus{}).sessions == 2);

  // Up to 3: nexusd starts two of its own (nexus-rollout beside it), named auto-N.
  std::tie(rc, out) = scale({"rollout", "3"});
  CHECK(rc == 0);
  CHECK_THAT(out, Catch::Contains("starting 2 engine(s)"));
  REQUIRE(wait_for([&] { return engines().size() == 3; }, std::chrono::seconds(60)));
  CHECK(engine_named(daemon, "auto-1").has_value());
  CHECK(engine_named(daemon, "auto-2").has_value());
  CHECK_THAT(nexus::query_status(daemon.socket()).rollout_scaling, Catch::Contains("nexusctl scale rollout 3"));
  CHECK(step_all(*alice, s).errors == std::vector<std::string>(2, ""));

  // Down to 0: all drain; the busy one once its sessions are gone.
  std::tie(rc, out) = scale({"rollout", "0"});
  CHECK(rc == 0);
  CHECK(wait_for([&] { return engines().size() == 1; }, std::chrono::seconds(30)));  // the two idle auto engines left
  CHECK(engine_named(daemon, "busy").value_or(nexus::EngineStatus{}).draining);
  alice->env_close(s.ids);
  CHECK(wait_exit(busy, std::chrono::seconds(30)) == 0);
  CHECK(wait_for([&] { return engines().empty(); }, std::chrono::seconds(10)));
}
