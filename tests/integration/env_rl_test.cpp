// The Environment Service and RL jobs through nexusd, with real tenant processes and libnexus:
// sessions belong to their tenant, bad requests are typed errors, a PPO job publishes versions
// that eval_tenant evaluates without changing the slot; external simulators speak protocol 3
// (request ids, the version handshake, truncated episode ends, several sessions per connection).
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "attach.hpp"
#include "processes.hpp"
#include "tenant_run.hpp"

using namespace nexus::test;

namespace {

std::unique_ptr<nexus::Client> attach(const Daemon& d, const std::string& tenant) {
  return attach_tenant(d, tenant, std::chrono::seconds(60));
}

template <class F>
nexus::ErrorCode error_of(F&& f) {
  try {
    f();
  } catch (const nexus::Error& e) {
    return e.code();
  }
  return nexus::ErrorCode::None;
}

// One session of `task`, opened with `max_steps` and reset with seed 5, and its observation tensors.
struct OneSession {
  std::vector<std::uint64_t> ids;
  nexus::Tensor images, state;
};
OneSession open_one(nexus::Client& c, const std::string& task, std::int32_t max_steps = 0) {
  const auto s = c.env_open(task, 1, max_steps);
  const std::int64_t h = s.image_size;
  OneSession one{s.ids, c.alloc(nexus::DType::UInt8, {1, 1, h, h, 3}), c.alloc(nexus::DType::Float32, {1, 4})};
  const std::vector<std::uint64_t> seed{5};
  REQUIRE(c.env_reset(one.ids, seed, one.images, one.state).errors[0].empty());
  return one;
}

}  // namespace

TEST_CASE("environment sessions belong to their tenant and bad requests are typed errors",
          "[integration][model][env]") {
  TempDir dir;
  Daemon daemon({"--weights", tiny_weights_path(), "--state-dir", dir.path + "/state", "--log-level", "warn"});
  auto alice = attach(daemon, "alice");
  auto mallory = attach(daemon, "mallory");
  const auto envs = alice->env_open("reach", 3);
  REQUIRE(envs.ids.size() == 3);
  CHECK(envs.state_dim == 4);
  CHECK(envs.action_dim == 2);
  CHECK(envs.max_steps == 40);
  const std::int64_t n = 3, h = envs.image_size;
  auto images = alice->alloc(nexus::DType::UInt8, {n, 1, h, h, 3});
  auto state = alice->alloc(nexus::DType::Float32, {n, 4});
  std::fill(images.raw().begin(), images.raw().end(), 0);
  const std::vector<std::uint64_t> seeds{1, 2, 3};
  const auto reset = alice->env_reset(envs.ids, seeds, images, state);
  REQUIRE(reset.errors == std::vector<std::string>(3, ""));
  CHECK(reset.instructions[0].find("reach the") == 0);
  // The observation was written into alice's arena: a rendered table, not zeros.
  CHECK(std::count(images.raw().begin(), images.raw().end(), 0) < static_cast<long>(images.raw().size()) / 2);

  std::vector<float> actions(6, 0.5f);
  const auto step = alice->env_step(envs.ids, actions, images, state);
  CHECK(step.errors == std::vector<std::string>(3, ""));
  CHECK(step.done == std::vector<bool>(3, false));

  // Another tenant cannot step, reset or close alice's sessions: they do not exist for it.
  auto m_images = mallory->alloc(nexus::DType::UInt8, {n, 1, h, h, 3});
  auto m_state = mallory->alloc(nexus::DType::Float32, {n, 4});
  CHECK(error_of([&] { mallory->env_step(envs.ids, actions, m_images, m_state); }) == nexus::ErrorCode::UnknownSession);
  CHECK(error_of([&] { mallory->env_reset(envs.ids, seeds, m_images, m_state); }) == nexus::ErrorCode::UnknownSession);
  CHECK(mallory->env_close(envs.ids) == 0);

  // Wrong action dimension, a wrongly shaped observation tensor, an unknown task, a bad count.
  std::vector<float> three_d(9, 0.1f);
  CHECK(error_of([&] { alice->env_step(envs.ids, three_d, images, state); }) == nexus::ErrorCode::EnvFailed);
  auto small = alice->alloc(nexus::DType::UInt8, {n, 1, 8, 8, 3});
  CHECK(error_of([&] { alice->env_step(envs.ids, actions, small, state); }) == nexus::ErrorCode::BadTensor);
  CHECK(error_of([&] { alice->env_open("fly", 1); }) == nexus::ErrorCode::EnvFailed);
  CHECK(error_of([&] { alice->env_open("reach", 0); }) == nexus::ErrorCode::EnvFailed);
  // A non-finite action is that session's error; the others step on.
  std::vector<float> one_bad{0.1f, 0.1f, std::nanf(""), 0.1f, 0.1f, 0.1f};
  const auto mixed = alice->env_step(envs.ids, one_bad, images, state);
  CHECK(mixed.errors[0].empty());
  CHECK(mixed.errors[1].find("finite") != std::string::npos);
  CHECK(mixed.failed[1] == false);
  CHECK(mixed.errors[2].empty());

  CHECK(alice->env_close(envs.ids) == 3);
  CHECK(error_of([&] { alice->env_step(envs.ids, actions, images, state); }) == nexus::ErrorCode::UnknownSession);
  CHECK(nexus::query_status(daemon.socket()).pid == daemon.pid());
}

TEST_CASE("a PPO job through nexusd publishes versions that evaluate read-only, and keeps only the newest",
          "[integration][model][rl]") {
  TempDir dir;
  // Two versions kept: the job publishes five (the starting policy and one per update).
  std::ofstream(dir.path + "/nexusd.toml") << "[model]\nversions_kept = 2\n";
  Daemon daemon({"--weights", tiny_weights_path(), "--state-dir", dir.path + "/state", "--log-level", "warn", "-c",
                 dir.path + "/nexusd.toml"});
  {
    // No job yet; a head RL cannot train is refused at start.
    auto c = attach(daemon, "bob");
    CHECK(error_of([&] { c->rl_status(); }) == nexus::ErrorCode::JobFailed);
    nexus::TenantSpec spec;
    spec.head = {.kind = "mlp_chunk", .state_dim = 4, .action_dim = 2, .chunk = 1};
    c->register_tenant(spec);
    CHECK(error_of([&] { c->rl_start({}); }) == nexus::ErrorCode::JobFailed);
    spec.head.kind = "gaussian";
    spec.head.token_queries = 2;  // records keep pooled features only
    c->register_tenant(spec);
    CHECK(error_of([&] { c->rl_start({}); }) == nexus::ErrorCode::JobFailed);
    spec.head.token_queries = 0;
    c->register_tenant(spec);
    CHECK(error_of([&] { c->rl_start({.algorithm = "grpo", .sessions = 6, .group_size = 4}); }) ==
          nexus::ErrorCode::JobFailed);
  }
  const auto [rc, out] = run_json({NEXUS_TEST_RL_TENANT, "--socket", daemon.socket(), "--tenant", "carol", "--iterations", "4",
                              "--sessions", "8", "--horizon", "16"},
                             dir, "rl");
  INFO(out.dump());
  REQUIRE(rc == 0);
  CHECK(out["state"] == "done");
  CHECK(out["iterations"] == 4);
  CHECK(out["first_version"] == 1);
  CHECK(out["version"] == 5);
  CHECK(out["env_steps"].get<int>() >= 4 * 8 * 16);
  const auto [erc, eval] = run_json({NEXUS_TEST_EVAL_TENANT, "--socket", daemon.socket(), "--tenant", "carol", "--episodes",
                                "10"},  // no --version: the latest published, never the live head
                               dir, "eval");
  INFO(eval.dump());
  CHECK(erc == 0);
  CHECK(eval["version"] == 5);
  CHECK(eval["unchanged"] == true);
  // Retention applies to versions an RL job publishes as to a tenant's publish(): a job of
  // 100 000 updates would otherwise hold 100 000 copies of the head (the soak's growth).
  const auto [orc, old] = run_json({NEXUS_TEST_EVAL_TENANT, "--socket", daemon.socket(), "--tenant", "carol",
                                    "--episodes", "2", "--version", "3"},
                                   dir, "eval-old");
  CHECK(orc != 0);
  CHECK(read_file(dir.path + "/eval-old.err").find("UnknownVersion") != std::string::npos);
  for (const char* kept : {"4", "1"}) {  // the newest two, and the job's starting policy (kept for comparison)
    const auto [krc, report] = run_json({NEXUS_TEST_EVAL_TENANT, "--socket", daemon.socket(), "--tenant", "carol",
                                         "--episodes", "2", "--version", kept},
                                        dir, std::string("eval-v") + kept);
    INFO("version " << kept << ": " << read_file(dir.path + "/eval-v" + kept + ".err"));
    CHECK(krc == 0);
  }
  // A synchronous job (RlStartRequest.synchronous) acts every record by the latest version; an
  // overlapped one, like carol's, has its producer act on during each update.
  const auto [src, sync] = run_json({NEXUS_TEST_RL_TENANT, "--socket", daemon.socket(), "--tenant", "dave",
                                     "--iterations", "3", "--sessions", "4", "--horizon", "8", "--synchronous"},
                                    dir, "rl-sync");
  INFO(sync.dump());
  REQUIRE(src == 0);
  CHECK(sync["state"] == "done");
  CHECK(sync["records_behind"] == 0);
  CHECK(sync["records_dropped"] == 0);
  CHECK(sync["observation_bytes"] == 0);  // a head-only tenant's records keep features alone
  CHECK(sync["split_minibatches"] == 0);  // and its minibatches (no backbone pass) stay whole
  CHECK(out["records_behind"].get<int>() >= 0);
  CHECK(nexus::query_status(daemon.socket()).pid == daemon.pid());
}

// DAPG's behaviour-cloning term through nexusd: the job samples the tenant's own loaded
// demonstrations for every update (RlStatus::demo_loss), and a request for demonstrations it
// cannot use is a typed error before anything starts.
TEST_CASE("an RL job keeps the tenant's demonstrations in its loss, and bad demonstration requests are refused",
          "[integration][model][rl][datasets]") {
  TempDir dir;
  const std::string push = dir.path + "/push.hdf5";
  REQUIRE(run_json({nexusctl_path(), "dataset", "record", "--task", "push", "--episodes", "4", "--out", push}, dir,
                   "record")
              .first == 0);
  Daemon daemon({"--weights", tiny_weights_path(), "--state-dir", dir.path + "/state", "--log-level", "warn"});
  {
    auto c = attach(daemon, "dana");
    nexus::TenantSpec spec;
    spec.head = {.kind = "gaussian", .state_dim = 4, .action_dim = 2, .chunk = 1};
    c->register_tenant(spec);
    c->dataset_load("plain", push);
    nexus::DatasetOptions normalized;
    normalized.normalize = true;
    c->dataset_load("normalized", push, normalized);
    // The refusal's reason (JobFailed is every refused start's code).
    auto refusal = [&](const std::string& dataset, double weight, std::int32_t batch = 16) -> std::string {
      try {
        c->rl_start({.task = "push", .sessions = 2, .horizon = 4, .iterations = 100000, .demo_dataset = dataset,
                     .demo_weight = weight, .demo_batch = batch});
      } catch (const nexus::Error& e) {
        return e.code() == nexus::ErrorCode::JobFailed ? e.what() : std::string("not JobFailed: ") + e.what();
      }
      return "started";
    };
    auto refused = [&](const std::string& dataset, double weight, std::int32_t batch, const std::string& reason) {
      const auto why = refusal(dataset, weight, batch);
      INFO(dataset << " weight " << weight << " batch " << batch << ": " << why);
      CHECK(why.find(reason) != std::string::npos);
    };
    refused("", 1.0, 16, "demo_weight needs demo_dataset");                 // a weight needs demonstrations
    refused("missing", 1.0, 16, "no dataset 'missing'");                     // not a dataset this tenant loaded
    refused("missing", 0.0, 16, "no dataset 'missing'");                     // named: checked at any weight
    refused("normalized", 1.0, 16, "loaded with normalize");                 // RL acts in the simulator's units
    for (double bad : {-1.0, 101.0, std::nan("")}) refused("plain", bad, 16, "demo weight must be 0..100");
    for (int bad : {0, 257}) refused("plain", 1.0, bad, "demo batch 1..256");
    // Nothing of the refusals is left behind: the same request with good values starts (and
    // runs until stopped: 100 000 updates).
    CHECK(refusal("plain", 1.0) == "started");
    CHECK(c->rl_status(/*stop=*/true).state == "stopped");
    // Another tenant's dataset of the same name is not this one's.
    auto other = attach(daemon, "eve");
    other->register_tenant(spec);
    CHECK(error_of([&] {
            other->rl_start({.task = "push", .sessions = 2, .horizon = 4, .iterations = 1, .demo_dataset = "plain",
                             .demo_weight = 1.0});
          }) == nexus::ErrorCode::JobFailed);
  }
  // rl_tenant --demos: a warm start on the file, then the job with the term in its loss.
  const auto [rc, out] = run_json({NEXUS_TEST_RL_TENANT, "--socket", daemon.socket(), "--tenant", "bob", "--task", "push",
                                   "--iterations", "3", "--sessions", "4", "--horizon", "8", "--demos", push,
                                   "--warm-start-steps", "20", "--demo-weight", "0.5", "--eval-untrained", "4"},
                                  dir, "rl-demos");
  INFO(out.dump() << "\n" << read_file(dir.path + "/rl-demos.err"));
  REQUIRE(rc == 0);
  CHECK(out["state"] == "done");
  CHECK(out["warm_start_steps"] == 20);
  CHECK(out["warm_start_loss"].is_number());
  // --eval-untrained: the head before its warm start was published first and evaluated by an eval
  // job at once (later versions would evict it); the demo prints it beside bob's before/after.
  CHECK(out["untrained_version"].get<std::uint64_t>() > 0);
  CHECK(out["first_version"].get<std::uint64_t>() > out["untrained_version"].get<std::uint64_t>());
  CHECK(out["untrained_success"].is_number());
  CHECK(out["demo_loss"].get<double>() != 0);  // the term was computed on sampled demonstrations
  CHECK(nexus::query_status(daemon.socket()).pid == daemon.pid());
}

TEST_CASE("an external environment killed mid-episode fails its sessions alone, and the tenant opens new ones",
          "[integration][model][env]") {
  TempDir dir;
  const std::string sim_socket = dir.path + "/sim.sock";
  auto start_sim = [&] {
    ::unlink(sim_socket.c_str());
    const pid_t p = spawn({NEXUS_TEST_EXTERNAL_ENV, "--socket", sim_socket}, {.stdout_path = dir.path + "/sim.out"});
    REQUIRE(eventually([&] { return ::access(sim_socket.c_str(), F_OK) == 0; }, std::chrono::seconds(10)));
    return p;
  };
  pid_t sim = start_sim();
  Daemon daemon({"--weights", tiny_weights_path(), "--state-dir", dir.path + "/state", "--log-level", "warn",
                 "--external-env", "mysim=" + sim_socket});
  auto alice = attach(daemon, "alice");
  auto bob = attach(daemon, "bob");
  const auto ext = alice->env_open("mysim:reach", 2);
  // Vectorised (protocol 3): both sessions are served on one connection (the simulator holds
  // its listener and that one).
  CHECK(eventually([&] { return count_fds(sim, "socket:") == 2; }, std::chrono::seconds(5)));
  const auto local = alice->env_open("reach", 1);
  const auto bobs = bob->env_open("reach", 1);
  const std::int64_t h = ext.image_size;
  auto images = alice->alloc(nexus::DType::UInt8, {2, 1, h, h, 3});
  auto state = alice->alloc(nexus::DType::Float32, {2, 4});
  auto one_image = alice->alloc(nexus::DType::UInt8, {1, 1, h, h, 3});
  auto one_state = alice->alloc(nexus::DType::Float32, {1, 4});
  auto b_image = bob->alloc(nexus::DType::UInt8, {1, 1, h, h, 3});
  auto b_state = bob->alloc(nexus::DType::Float32, {1, 4});
  const std::vector<std::uint64_t> seeds{5, 6}, seed5{5};
  REQUIRE(alice->env_reset(ext.ids, seeds, images, state).errors == std::vector<std::string>(2, ""));
  REQUIRE(alice->env_reset(local.ids, seed5, one_image, one_state).errors[0].empty());
  // The external process runs the same task code: seed 5 renders the same frame in both.
  CHECK(std::equal(one_image.raw().begin(), one_image.raw().end(), images.raw().begin()));
  REQUIRE(bob->env_reset(bobs.ids, seed5, b_image, b_state).errors[0].empty());
  const std::vector<float> two(4, 0.3f), one(2, 0.3f);
  auto r = alice->env_step(ext.ids, two, images, state);
  CHECK(r.errors == std::vector<std::string>(2, ""));
  // A bad action is reported by the external process as the caller's error, not a fault.
  const std::vector<float> bad{0.3f, 0.3f, std::nanf(""), 0.f};
  r = alice->env_step(ext.ids, bad, images, state);
  CHECK(r.errors[1].find("finite") != std::string::npos);
  CHECK_FALSE(r.failed[1]);
  // One session of the connection steps on its own, the other keeps its episode.
  r = alice->env_step(std::span(ext.ids).subspan(1), one, one_image, one_state);
  CHECK(r.errors == std::vector<std::string>{""});

  ::kill(sim, SIGKILL);
  REQUIRE(wait_exit(sim, std::chrono::seconds(10)).has_value());
  r = alice->env_step(ext.ids, two, images, state);
  CHECK(r.failed == std::vector<bool>{true, true});
  CHECK(r.errors[0].find("external environment") != std::string::npos);
  CHECK(alice->env_step(local.ids, one, one_image, one_state).errors[0].empty());  // the tenant's others step on
  CHECK(bob->env_step(bobs.ids, one, b_image, b_state).errors[0].empty());          // other tenants too
  CHECK(error_of([&] { alice->env_open("mysim:reach", 1); }) == nexus::ErrorCode::EnvFailed);  // nobody listens
  CHECK(error_of([&] { alice->env_open("nosuch:reach", 1); }) == nexus::ErrorCode::EnvFailed);

  sim = start_sim();
  CHECK(alice->env_close(ext.ids) == 2);
  const auto fresh = alice->env_open("mysim:reach", 1);
  CHECK(alice->env_reset(fresh.ids, seed5, one_image, one_state).errors[0].empty());
  CHECK(alice->env_step(fresh.ids, one, one_image, one_state).errors[0].empty());
  ::kill(sim, SIGKILL);
  wait_exit(sim, std::chrono::seconds(10));
  CHECK(nexus::query_status(daemon.socket()).pid == daemon.pid());
}

TEST_CASE("external environments speak protocol 3: ids catch an extra reply, versions are checked, episode limits truncate",
          "[integration][model][env]") {
  TempDir dir;
  std::vector<pid_t> sims;
  auto start_sim = [&](const std::string& name, std::vector<std::string> extra) {
    const std::string socket = dir.path + "/" + name + ".sock";
    std::vector<std::string> argv{NEXUS_TEST_EXTERNAL_ENV, "--socket", socket};
    argv.insert(argv.end(), extra.begin(), extra.end());
    sims.push_back(spawn(argv, {.stdout_path = dir.path + "/" + name + ".out"}));
    REQUIRE(eventually([&] { return ::access(socket.c_str(), F_OK) == 0; }, std::chrono::seconds(10)));
    return name + "=" + socket;
  };
  const auto good = start_sim("good", {}), chatty = start_sim("chatty", {"--extra-reply-after", "2"}),
             old = start_sim("old", {"--protocol", "2"}), terse = start_sim("terse", {"--short-reply-after", "4"});
  Daemon daemon({"--weights", tiny_weights_path(), "--state-dir", dir.path + "/state", "--log-level", "warn",
                 "--external-env", good, "--external-env", chatty, "--external-env", old, "--external-env", terse});
  auto c = attach(daemon, "alice");
  // A simulator of another protocol version is refused at open, saying so.
  try {
    c->env_open("old:reach", 1);
    FAIL("a protocol-2 simulator was accepted");
  } catch (const nexus::Error& e) {
    CHECK(e.code() == nexus::ErrorCode::EnvFailed);
    CHECK_THAT(e.what(), Catch::Contains("protocol 2") && Catch::Contains("nexusd speaks 3"));
  }
  // Built-in and external sessions alike end at the limit of 3 steps as truncated, not terminated.
  for (const std::string task : {"reach", "good:reach"}) {
    auto s = open_one(*c, task, 3);
    const std::vector<float> still(2, 0.f);
    for (int i = 1; i <= 3; ++i) {
      const auto r = c->env_step(s.ids, still, s.images, s.state);
      INFO(task << " step " << i << ": " << r.errors[0]);
      REQUIRE(r.errors[0].empty());
      CHECK(r.done[0] == (i == 3));
      CHECK(r.truncated[0] == (i == 3));
      CHECK_FALSE(r.success[0]);
    }
  }
  // A simulator that sends one reply twice: the next step gets the duplicate, whose id is the
  // previous request's. The session fails, saying so, instead of every later reply being one behind.
  auto s = open_one(*c, "chatty:reach");
  const std::vector<float> act(2, 0.2f);
  CHECK(c->env_step(s.ids, act, s.images, s.state).errors[0].empty());
  CHECK(c->env_step(s.ids, act, s.images, s.state).errors[0].empty());  // its reply is sent twice
  const auto r = c->env_step(s.ids, act, s.images, s.state);
  CHECK(r.failed[0]);
  CHECK_THAT(r.errors[0], Catch::Contains("a late or extra reply"));
  // A simulator whose reply leaves out a session it was asked for: the connection's sessions
  // fail, saying so, rather than a session being given another's observation.
  {
    auto pair = c->env_open("terse:reach", 2);
    const auto h = pair.image_size;
    auto images = c->alloc(nexus::DType::UInt8, {2, 1, h, h, 3});
    auto state = c->alloc(nexus::DType::Float32, {2, 4});
    const std::vector<std::uint64_t> seeds{1, 2};
    REQUIRE(c->env_reset(pair.ids, seeds, images, state).errors == std::vector<std::string>(2, ""));
    const std::vector<float> both(4, 0.2f);
    CHECK(c->env_step(pair.ids, both, images, state).errors == std::vector<std::string>(2, ""));  // steps 1-2: whole
    const auto t = c->env_step(pair.ids, both, images, state);
    CHECK(t.failed == std::vector<bool>{true, true});
    CHECK_THAT(t.errors[1], Catch::Contains("answered for 1 sessions, not the 2 named"));
  }
  CHECK(nexus::query_status(daemon.socket()).pid == daemon.pid());
  for (pid_t p : sims) ::kill(p, SIGKILL), wait_exit(p, std::chrono::seconds(10));
}
