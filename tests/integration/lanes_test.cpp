// Executor lanes ([model] inference_lanes, training_lanes; docs/design/service.md, "Executor
// lanes"): a tenant's prediction is answered while another tenant's whole training step runs on
// the training lane, and while another's long prediction runs on the other inference lane; a
// tenant's own prediction waits for its own step (its slot is leased by the turn: it sees the
// stepped head, never a half-written one); a tenant predicting (or training) alone is served by
// the first inference (or training) lane; deterministic mode keeps one lane.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <random>
#include <thread>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "metrics_text.hpp"
#include "processes.hpp"

using namespace nexus::test;
using Clock = std::chrono::steady_clock;

namespace {

struct Batch {
  nexus::Tensor images, tokens, mask, actions;
  nexus::Observation obs() const { return {&images, &tokens, &mask, nullptr}; }
};

// `n` rows of noise images; actions follow each image's brightness (something to learn).
Batch make_batch(nexus::Client& c, const nexus::BackboneInfo& bb, std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  Batch b{c.alloc(nexus::DType::UInt8, {n, 1, bb.image_size, bb.image_size, 3}),
          c.alloc(nexus::DType::Int32, {n, bb.max_tokens}), c.alloc(nexus::DType::UInt8, {n, bb.max_tokens}),
          c.alloc(nexus::DType::Float32, {n, 1, 2})};
  const std::size_t per = b.images.raw().size() / static_cast<std::size_t>(n);
  auto* act = reinterpret_cast<float*>(b.actions.raw().data());
  for (std::int64_t i = 0; i < n; ++i) {
    const auto level = static_cast<int>(rng() % 200);
    for (std::size_t k = 0; k < per; ++k)
      b.images.raw()[static_cast<std::size_t>(i) * per + k] = static_cast<std::uint8_t>(level + rng() % 56);
    act[2 * i] = static_cast<float>(level) / 100.0f - 1.0f;
    act[2 * i + 1] = 0.5f;
  }
  for (auto& v : b.tokens.raw()) v = 0;
  for (auto& v : b.mask.raw()) v = 1;
  return b;
}

std::uint64_t requests_of(const nexus::DaemonStatus& s, const std::string& tenant) {
  for (const auto& t : s.tenants)
    if (t.name == tenant) return t.requests;
  return 0;
}

// Waits until `tenant`'s request sent after `sent` requests has reached the daemon and left its
// queue (the inference one or the training one): its turn runs; then a little longer.
void wait_until_running(const Daemon& d, const std::string& tenant, std::uint64_t sent, bool inference) {
  for (;;) {
    const auto s = nexus::query_status(d.socket());
    if (requests_of(s, tenant) > sent && (inference ? s.inference_queued : s.training_queued) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

std::vector<std::string> flags(const std::string& dir, const std::string& model_config) {
  std::ofstream(dir + "/nexusd.toml") << "[model]\n" << model_config;
  return {"--weights", tiny_weights_path(), "--log-level", "warn", "--state-dir", dir + "/state", "-c",
          dir + "/nexusd.toml"};
}

// The samples the daemon has counted for `tenant`: accounted inside its step's turn, before the
// turn ends (a step's reply may reach its tenant a little before).
std::uint64_t samples_of(const Daemon& d, const std::string& tenant) {
  for (const auto& u : nexus::query_status(d.socket()).usage)
    if (u.name == tenant) return u.samples;
  return 0;
}

std::unique_ptr<nexus::Client> attach(const Daemon& d, const std::string& tenant) {
  return nexus::Client::attach({.socket_path = d.socket(), .tenant = tenant, .timeout = std::chrono::seconds(300)});
}

// A small head; one step moves its predictions clearly.
nexus::TenantSpec small_head() {
  nexus::TenantSpec spec{.head = {.kind = "mlp_chunk", .action_dim = 2, .chunk = 1, .hidden = 64}, .seed = 5};
  spec.optimizer.lr = 1e-2;
  return spec;
}

}  // namespace

TEST_CASE("with executor lanes a tenant's prediction comes back while another tenant's whole step trains or its long "
          "prediction runs, and a tenant's own prediction waits for its step",
          "[integration][model][lanes]") {
  TempDir dir;
  // Steps stay whole (no turn budget): the big step is one long training turn.
  Daemon d(flags(dir.path, "inference_lanes = 2\ntraining_lanes = 1\nmax_training_turn_ms = 0\n"));
  const auto spec = small_head();
  auto big = attach(d, "big");
  auto small = attach(d, "small");
  const auto bb = big->register_tenant(spec);
  small->register_tenant(spec);
  const auto probe_big = make_batch(*big, bb, 4, 1), probe_small = make_batch(*small, bb, 4, 1);
  small->predict(probe_small.obs());  // both slots resident, the first passes made
  const auto before = big->predict(probe_big.obs()).actions;

  // About a second of training on this machine in one turn (much more under a sanitizer).
  const auto step = make_batch(*big, bb, 1024, 2);
  const auto sent = requests_of(nexus::query_status(d.socket()), "big");
  std::atomic<Clock::time_point> step_done{};
  std::thread trainer([&] {
    big->sft_step(step.obs(), step.actions);
    step_done = Clock::now();
  });
  wait_until_running(d, "big", sent, /*inference=*/false);
  small->predict(probe_small.obs());
  const auto other_done = Clock::now();
  const auto own = big->predict(probe_big.obs()).actions;  // waits for big's turn to end
  trainer.join();
  // The inference lane answered the other tenant while the training lane was inside the step.
  CHECK(step_done.load() != Clock::time_point{});
  CHECK(other_done < step_done.load());
  // Big's own prediction saw the stepped head: the same as a prediction after everything settled,
  // and not the one from before the step.
  CHECK(own == big->predict(probe_big.obs()).actions);
  CHECK(own != before);

  // A long prediction of big's on one inference lane; small's comes back from the other meanwhile.
  const auto wide = make_batch(*big, bb, 1024, 3);
  const auto asked = requests_of(nexus::query_status(d.socket()), "big");
  std::atomic<Clock::time_point> wide_done{};
  std::thread predictor([&] {
    big->predict(wide.obs());
    wide_done = Clock::now();
  });
  wait_until_running(d, "big", asked, /*inference=*/true);
  small->predict(probe_small.obs());
  const auto small_done = Clock::now();
  predictor.join();
  CHECK(small_done < wide_done.load());

  const auto metrics = nexus::query_metrics(d.socket());
  CHECK_THAT(metrics, Catch::Contains("lane=\"1\",serves=\"inference\"") &&
                          Catch::Contains("lane=\"2\",serves=\"training\""));
  // Those turns beside another lane's ran on a share of the cores, not on all of them each
  // (daemon/model/pass_threads.hpp): some lane's turns were narrowed.
  double narrow_s = 0;
  for (const char* lane : {"lane=\"0\",serves=\"inference\"", "lane=\"1\",serves=\"inference\"",
                           "lane=\"2\",serves=\"training\""})
    narrow_s += metric_sample(metrics, std::string("nexus_executor_seconds_total{replica=\"0\",") + lane +
                                           ",device=\"cpu\",part=\"narrow\"}");
  CHECK(narrow_s > 0);
}

TEST_CASE("deterministic mode keeps one executor lane when two are configured", "[integration][model][lanes]") {
  TempDir dir;
  Daemon d(flags(dir.path, "inference_lanes = 2\ntraining_lanes = 1\ndeterministic = true\n"));
  const auto metrics = nexus::query_metrics(d.socket());
  CHECK_THAT(metrics, Catch::Contains("lane=\"0\",serves=\"both\""));
  CHECK_THAT(metrics, !Catch::Contains("lane=\"1\""));
}

TEST_CASE("with two training lanes a tenant's step runs beside another's long step unless it is ahead in virtual "
          "time",
          "[integration][model][lanes]") {
  TempDir dir;
  // Steps stay whole (no turn budget): a 1024-sample step is one long training turn (on the CPU,
  // where it takes about a second). A 1 ms window: the tenant a long step was charged to is ahead.
  Daemon d(flags(dir.path, "devices = [\"cpu\"]\ninference_lanes = 1\ntraining_lanes = 2\nmax_training_turn_ms = 0\n"
                           "group_window_ms = 1\n"));
  const auto spec = small_head();
  auto first = attach(d, "first");
  auto second = attach(d, "second");
  const auto bb = first->register_tenant(spec);
  second->register_tenant(spec);
  const auto long_first = make_batch(*first, bb, 1024, 2), short_first = make_batch(*first, bb, 4, 3);
  const auto long_second = make_batch(*second, bb, 1024, 4), short_second = make_batch(*second, bb, 4, 5);

  // Neither has trained: the second's short step starts on the other lane, beside the first's
  // long one, and comes back before it (the daemon has not counted the first's samples yet).
  auto sent = requests_of(nexus::query_status(d.socket()), "first");
  std::thread trainer([&] { first->sft_step(long_first.obs(), long_first.actions); });
  wait_until_running(d, "first", sent, /*inference=*/false);
  second->sft_step(short_second.obs(), short_second.actions);
  CHECK(samples_of(d, "first") == 0);
  trainer.join();

  // Now the first is far ahead (a whole long step charged against a short one): while the
  // second's long step runs, the first's short step waits for it (weights hold across lanes).
  sent = requests_of(nexus::query_status(d.socket()), "second");
  std::thread second_trainer([&] { second->sft_step(long_second.obs(), long_second.actions); });
  wait_until_running(d, "second", sent, /*inference=*/false);
  first->sft_step(short_first.obs(), short_first.actions);
  CHECK(samples_of(d, "second") == 4 + 1024);  // its long step had ended when the first's began
  second_trainer.join();

  const auto metrics = nexus::query_metrics(d.socket());
  CHECK_THAT(metrics, Catch::Contains("lane=\"1\",serves=\"training\"") &&
                          Catch::Contains("lane=\"2\",serves=\"training\""));
}

// nexusd shortens libgomp's spin for itself (daemon/process_settings.cpp, settle_openmp_spin): libgomp reads
// it before main, so nexusd starts itself again with it set; a setting in its environment stays.
TEST_CASE("nexusd sets libgomp's spin for itself and keeps one its environment gives", "[integration][lanes]") {
  const auto environment = [](pid_t pid) {
    const auto text = read_file("/proc/" + std::to_string(pid) + "/environ");
    std::vector<std::string> vars;
    for (std::size_t at = 0, end; at < text.size(); at = end + 1) {
      end = text.find('\0', at);
      if (end == std::string::npos) end = text.size();
      vars.push_back(text.substr(at, end - at));
    }
    return vars;
  };
  const auto has = [](const std::vector<std::string>& vars, const std::string& var) {
    return std::find(vars.begin(), vars.end(), var) != vars.end();
  };
  ::unsetenv("GOMP_SPINCOUNT");  // the test's own environment, which nexusd inherits
  ::unsetenv("OMP_WAIT_POLICY");
  {
    Daemon d({"--backbone", "none"});
    CHECK(has(environment(d.pid()), "GOMP_SPINCOUNT=3000"));
    CHECK(d.stop() == 0);  // the same process the harness started: it answers to its pid
  }
  {
    Daemon d({"--backbone", "none"}, nexusd_path(), {{"GOMP_SPINCOUNT", "50000"}});
    const auto vars = environment(d.pid());
    CHECK(has(vars, "GOMP_SPINCOUNT=50000"));
    CHECK_FALSE(has(vars, "GOMP_SPINCOUNT=3000"));
  }
  Daemon d({"--backbone", "none"}, nexusd_path(), {{"OMP_WAIT_POLICY", "passive"}});
  const auto vars = environment(d.pid());
  CHECK(has(vars, "OMP_WAIT_POLICY=passive"));
  CHECK_FALSE(std::any_of(vars.begin(), vars.end(), [](const std::string& v) { return v.rfind("GOMP_SPINCOUNT=", 0) == 0; }));
}

namespace {
// Seconds of turns on lane `lane` of replica 0 (nexusctl metrics' executor profile).
double lane_turn_seconds(const std::string& metrics, int lane, const char* serves) {
  return metric_sample(metrics, "nexus_executor_seconds_total{replica=\"0\",lane=\"" + std::to_string(lane) +
                                    "\",serves=\"" + serves + "\",device=\"cpu\",part=\"turns\"}");
}
}  // namespace

// A queue's lanes take its turns in order (Replica::earlier_lane_idle): a later lane only while
// every earlier one runs a turn; and a tenant's request waits in the queue while its previous turn
// runs (WorkQueues::next), so its next request, sent as soon as the lane answered, is not taken by
// the second lane before the first has marked itself idle. So a tenant predicting alone, one
// request at a time, is served by the first inference lane, whose OpenMP pool stays warm
// (daemon/model/pass_threads.hpp). Mutations: without the hold the second lane took 16-25% of the
// turn time in one run of three here; without the order the lanes split the turns by who wakes
// first. The bound leaves room for a loaded machine: a share, not zero.
TEST_CASE("a tenant predicting alone is served by the first inference lane", "[integration][model][lanes]") {
  TempDir dir;
  Daemon d(flags(dir.path, "inference_lanes = 2\ntraining_lanes = 1\n"));
  auto c = attach(d, "alone");
  const auto bb = c->register_tenant(small_head());
  const auto probe = make_batch(*c, bb, 1, 7);
  for (int i = 0; i < 300; ++i) c->predict(probe.obs());
  const auto metrics = nexus::query_metrics(d.socket());
  const double first = lane_turn_seconds(metrics, 0, "inference"), second = lane_turn_seconds(metrics, 1, "inference");
  INFO("first lane " << first << " s of turns, second lane " << second << " s");
  REQUIRE(first > 0);
  CHECK(second < 0.2 * (first + second));
}

// The same for the Training Queue's lanes: a training lane reads as idle as soon as its turn's
// tenants are unmarked (Replica::execute), so a lone tenant's next step, sent as soon as the
// reply went out, goes to the first training lane. Mutation: with the lane still reading busy
// until it looped back, the second lane took 5-6% of the turn time in each of three runs here.
TEST_CASE("a tenant training alone is served by the first training lane", "[integration][model][lanes]") {
  TempDir dir;
  Daemon d(flags(dir.path, "inference_lanes = 1\ntraining_lanes = 2\n"));
  auto c = attach(d, "alone");
  const auto bb = c->register_tenant(small_head());
  const auto batch = make_batch(*c, bb, 16, 7);
  for (int i = 0; i < 200; ++i) c->sft_step(batch.obs(), batch.actions);
  const auto metrics = nexus::query_metrics(d.socket());
  const double first = lane_turn_seconds(metrics, 1, "training"), second = lane_turn_seconds(metrics, 2, "training");
  INFO("first training lane " << first << " s of turns, second " << second << " s");
  REQUIRE(first > 0);
  CHECK(second < 0.02 * (first + second));
}

// An inference group waits (up to the batch window) only for tenants that have asked for
// inference lately: one that only trains never joins a group, so waiting for it stalled every
// group beside it for the whole window (docs/design/service.md, "An inference group waits only
// for tenants that could join it"). Mutation: counting every attached tenant, as before, makes
// each predict below wait out the 5 s window.
TEST_CASE("an inference group does not wait out the window for a tenant that only trains", "[integration][model][lanes]") {
  TempDir dir;
  Daemon d(flags(dir.path, "batch_wait_us = 5000000\n"));  // far longer than a predict
  auto trainer = attach(d, "trainer");
  const auto bb = trainer->register_tenant(small_head());
  const auto batch = make_batch(*trainer, bb, 4, 3);
  trainer->sft_step(batch.obs(), batch.actions);
  auto actor = attach(d, "actor");
  actor->register_tenant(small_head());
  const auto probe = make_batch(*actor, bb, 1, 7);
  const auto t0 = Clock::now();
  for (int i = 0; i < 3; ++i) actor->predict(probe.obs());
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  INFO("three predicts beside a tenant that only trains took " << took << " s");
  CHECK(took < 4.0);
}
