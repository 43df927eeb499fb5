// RL in-process: an RlJob (producer and actor loops, Training Queue, Environment Service
// sessions) on the pretrained tiny backbone, with a policy port that runs the backbone and the
// slot directly instead of through nexusd's executor. Checks that PPO and GRPO raise the
// closed-loop success of the greedy (mean) policy on reach over the starting policy.
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include <cstdlib>
#include <mutex>

#include "daemon/env/env_service.hpp"
#include "daemon/model/backbone.hpp"
#include "daemon/rl/rl_job.hpp"
#include "expert_demos.hpp"
#include "figures.hpp"
#include "processes.hpp"
#include "sim/baselines.hpp"

using namespace nexus;

namespace {

class InProcessPolicy final : public rl::PolicyPort {
 public:
  InProcessPolicy(model::VLABackbone& b, model::TenantSlot& slot) : b_(b), slot_(slot) {}
  Acted act(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask,
            const torch::Tensor& state) override {
    std::lock_guard lk(mu_);
    torch::NoGradGuard ng;
    auto f = b_->forward(images, tokens, mask.to(torch::kBool));
    auto a = slot_.act(f, state);
    return {f.pooled.clone(), a.actions, a.log_prob, a.version};
  }
  void with_slot(const std::function<void(model::TenantSlot&)>& fn) override {
    std::lock_guard lk(mu_);
    fn(slot_);
  }
  std::int64_t image_size() const override { return b_->config().image_size; }
  std::int64_t max_tokens() const override { return b_->config().max_tokens; }
  std::int64_t feature_dim() const override { return b_->config().dim; }

 private:
  model::VLABackbone& b_;
  model::TenantSlot& slot_;
  std::mutex mu_;
};

struct Greedy {
  double success = 0, mean_return = 0;
};

// The instruction naming another of reach's balls (red -> green -> blue -> red).
std::string another_ball(std::string instruction) {
  static const std::vector<std::pair<std::string, std::string>> next = {{"red", "green"}, {"green", "blue"}, {"blue", "red"}};
  for (const auto& [from, to] : next)
    if (auto at = instruction.find(from); at != std::string::npos) return instruction.replace(at, from.size(), to);
  FAIL("no ball colour in \"" << instruction << "\"");
  return instruction;
}

// Greedy closed-loop success and mean return of a version (0: live) over seeded episodes of
// `task`.
// With `swapped`, the policy is told to reach another ball than the task's (success is still
// the task's): a policy that follows instructions then mostly fails, one that ignores them does not.
Greedy greedy(env::EnvService& envs, model::VLABackbone& b, model::TenantSlot& slot, std::uint64_t version,
              int episodes, std::uint64_t seed0, bool swapped = false, const std::string& task = "reach") {
  const auto& c = b->config();
  auto opened = envs.open("eval", task, episodes, static_cast<int>(c.image_size), 0);
  const auto n = static_cast<std::int64_t>(episodes);
  auto img = torch::empty({n, 1, c.image_size, c.image_size, 3}, torch::kUInt8);
  auto st = torch::empty({n, 4});
  std::vector<std::uint64_t> seeds;
  for (int e = 0; e < episodes; ++e) seeds.push_back(seed0 + static_cast<std::uint64_t>(e));
  auto res = envs.reset("eval", opened.ids, seeds, img.data_ptr<std::uint8_t>(), st.data_ptr<float>());
  auto tok = torch::zeros({n, c.max_tokens}, torch::kInt32);
  auto m = torch::zeros({n, c.max_tokens}, torch::kBool);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto& instruction = res[static_cast<std::size_t>(i)].instruction;
    model::tokenize_into(swapped ? another_ball(instruction) : instruction, tok, m, i);
  }
  std::vector<bool> done(static_cast<std::size_t>(n), false), ok(static_cast<std::size_t>(n), false);
  double total = 0;
  torch::NoGradGuard ng;
  for (int t = 0; t < opened.spec.max_steps; ++t) {
    auto a = slot.predict(b->forward(img, tok, m), st, version).select(1, 0).contiguous();
    std::vector<std::uint64_t> ids;
    std::vector<float> acts;
    std::vector<std::int64_t> rows;
    for (std::int64_t i = 0; i < n; ++i)
      if (!done[static_cast<std::size_t>(i)]) {
        rows.push_back(i);
        ids.push_back(opened.ids[static_cast<std::size_t>(i)]);
        acts.push_back(a[i][0].item<float>());
        acts.push_back(a[i][1].item<float>());
      }
    if (rows.empty()) break;
    const auto k = static_cast<std::int64_t>(rows.size());
    auto im2 = torch::empty({k, 1, c.image_size, c.image_size, 3}, torch::kUInt8);
    auto st2 = torch::empty({k, 4});
    auto out = envs.step("eval", ids, acts, im2.data_ptr<std::uint8_t>(), st2.data_ptr<float>());
    auto index = torch::tensor(rows, torch::kLong);
    img.index_copy_(0, index, im2);
    st.index_copy_(0, index, st2);
    for (std::size_t j = 0; j < rows.size(); ++j) {
      const auto i = static_cast<std::size_t>(rows[j]);
      total += out[j].outcome.reward;
      if (out[j].outcome.done) done[i] = true, ok[i] = out[j].outcome.success;
    }
  }
  envs.close("eval", opened.ids);
  return {static_cast<double>(std::count(ok.begin(), ok.end(), true)) / episodes, total / episodes};
}

// Overrides for tuning runs (NEXUS_RL_TEST_*); the defaults are what CI runs.
double env_num(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v ? std::atof(v) : fallback;
}

// Runs the job and returns the greedy figures before and after.
// Every seed (head, episodes, evaluation) derives from the test's seed variant k.
// 200 greedy episodes: at 100, the layouts' own binomial noise (SE 0.03-0.05) was as large as
// the spread between runs of one seed that overlapped jobs showed, and CI's verdict rested on it.
// The jobs here are synchronous (RlConfig::synchronous): which version acts on which step no
// longer depends on thread timing. Separate runs of one seed still differed a little (PPO's gain
// 0.57 and 0.64 for seed 0: learning-margins.md), so the bounds keep room for run-to-run drift.
constexpr int kEvalEpisodes = 200;
// PPO's greedy success over the nearest-ball baseline's on the same layouts (strictly above it),
// and over its own success when told to reach another ball. Bounds: docs/design/learning-margins.md.
constexpr double kOverNearest = 0.0;
constexpr double kInstructionUse = 0.25;
constexpr double kGrpoReturnGain = 1.0;    // GRPO's greedy mean return over the starting policy's
constexpr double kGrpoSuccessGain = 0.03;  // and its greedy success
std::uint64_t eval_seed0() { return 70000 + 1000 * test::test_seed(); }
std::vector<std::uint64_t> eval_seeds() {
  std::vector<std::uint64_t> seeds;
  for (int e = 0; e < kEvalEpisodes; ++e) seeds.push_back(eval_seed0() + static_cast<std::uint64_t>(e));
  return seeds;
}
struct RlRun {
  Greedy before, after;
  Greedy after_swapped;  // the trained policy told to reach another ball (greedy's `swapped`)
};
RlRun run_rl(const std::string& algorithm, int iterations, int sessions, int group_size) {
  torch::set_num_threads(2);
  const std::uint64_t k = test::test_seed();
  const std::uint64_t eval_seed = eval_seed0();
  model::VLABackbone b(*model::named_backbone("tiny"));
  model::load_weights(*b, test::tiny_weights_path());
  b->freeze();
  model::TenantSlot slot({.kind = "gaussian", .state_dim = 4, .action_dim = 2, .chunk = 1, .hidden = 256},
                         {.lr = env_num("NEXUS_RL_TEST_LR", 1e-3)}, b->config().dim, 11 + k);
  env::EnvService envs({.workers = 1});
  InProcessPolicy policy(b, slot);
  const auto before = greedy(envs, b, slot, 0, kEvalEpisodes, eval_seed);
  rl::RlConfig config;
  config.algorithm = algorithm;
  config.seed = 1 + k;
  config.sessions = static_cast<int>(env_num("NEXUS_RL_TEST_SESSIONS", sessions));
  config.group_size = static_cast<int>(env_num("NEXUS_RL_TEST_GROUP", group_size));
  config.horizon = static_cast<int>(env_num("NEXUS_RL_TEST_HORIZON", 32));
  config.iterations = static_cast<int>(env_num("NEXUS_RL_TEST_ITERATIONS", iterations));
  config.update.entropy = env_num("NEXUS_RL_TEST_ENTROPY", 0.0);
  config.update.epochs = static_cast<int>(env_num("NEXUS_RL_TEST_EPOCHS", 4));
  config.synchronous = env_num("NEXUS_RL_TEST_SYNC", 1) != 0;  // the same run for the same seed
  std::uint64_t last = 0;
  {
    rl::RlJob job("tenant", config, policy, envs);
    while (!job.finished()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      const auto p = job.progress();
      if (p.iterations % 10 == 0 && p.iterations > 0 && p.iterations != static_cast<int>(last))
        std::fprintf(stderr, "%s it=%d v=%llu steps=%llu ep=%llu success=%.2f return=%.2f pl=%.4f vl=%.4f ent=%.3f %.0fs\n",
                     algorithm.c_str(), p.iterations, (unsigned long long)p.version, (unsigned long long)p.env_steps,
                     (unsigned long long)p.episodes, p.recent_success, p.recent_return, p.policy_loss, p.value_loss,
                     p.entropy, p.seconds);
      last = static_cast<std::uint64_t>(p.iterations);
    }
    const auto p = job.progress();
    INFO(p.error);
    REQUIRE(p.state == rl::RunState::Done);
    last = p.version;
  }
  const auto after = greedy(envs, b, slot, last, kEvalEpisodes, eval_seed);
  const auto swapped = greedy(envs, b, slot, last, kEvalEpisodes, eval_seed, /*swapped=*/true);
  std::fprintf(stderr, "%s: greedy success %.2f -> %.2f (%.2f told another ball), mean return %.2f -> %.2f\n",
               algorithm.c_str(), before.success, after.success, swapped.success, before.mean_return, after.mean_return);
  return {before, after, swapped};
}

}  // namespace

TEST_CASE("PPO raises greedy success on reach over the starting policy and past ignoring the instruction",
          "[model][rl][learning]") {
  // 100 updates (51 k steps): at 60, seed 0 under CI's -j2 gave greedy gains from 0.19 (a CI
  // failure, its sampled training success 0.59) to 0.55 between runs; greedy success still rises
  // from update 60 to 90 and then levels off (learning-margins.md).
  const auto [before, after, swapped] = run_rl("ppo", 100, 16, 8);
  // Bounds: docs/design/learning-margins.md (seed distribution).
  CHECK(test::figure_holds("ppo_reach.success_gain", after.success - before.success, ">=", 0.2, kEvalEpisodes));
  // On the same layouts, a scripted policy that heads for the nearest ball without reading
  // the instruction (sim/baselines.hpp): PPO must do better, or it learnt where balls are and
  // not which one is named.
  const auto nearest = sim::instruction_ignoring_reach(sim::IgnoringPolicy::NearestBall, eval_seeds());
  std::fprintf(stderr, "ppo: greedy success %.2f against the nearest-ball baseline's %.2f\n", after.success,
               nearest.success);
  CHECK(test::figure_holds("ppo_reach.over_nearest_ball", after.success - nearest.success, ">", kOverNearest,
                           kEvalEpisodes));
  // Reach also lets a policy succeed without reading the instruction by visiting the balls in
  // turn (the sweep baseline scores 94-99%), so success alone cannot show that PPO reads it.
  // Told to reach another ball, a policy that reads the instruction goes there and fails; one
  // that ignores it succeeds as often as before.
  CHECK(test::figure_holds("ppo_reach.instruction_use", after.success - swapped.success, ">=", kInstructionUse,
                           kEvalEpisodes));
}

TEST_CASE("PPO keeps every truncated episode's true last observation for its value bootstrap", "[model][rl]") {
  torch::set_num_threads(2);
  model::VLABackbone b(*model::named_backbone("tiny"));
  model::load_weights(*b, test::tiny_weights_path());
  b->freeze();
  model::TenantSlot slot({.kind = "gaussian", .state_dim = 4, .action_dim = 2, .chunk = 1, .hidden = 256}, {.lr = 1e-3},
                         b->config().dim, 11);
  env::EnvService envs({.workers = 1});
  InProcessPolicy policy(b, slot);
  rl::RlConfig config;
  config.sessions = 4, config.horizon = 8, config.iterations = 3, config.max_steps = 5;  // most episodes hit the limit
  rl::RlJob job("tenant", config, policy, envs);
  while (!job.finished()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto p = job.progress();
  INFO(p.error);
  REQUIRE(p.state == rl::RunState::Done);
  INFO(p.episodes << " episodes, " << p.truncated_episodes << " truncated, " << p.truncations_kept << " kept");
  CHECK(p.truncated_episodes > 0);
  CHECK(p.truncated_episodes <= p.episodes);
  CHECK(p.truncations_kept == p.truncated_episodes);
}

// A synchronous job acts every record with the latest version and waits for its update, so two
// runs from the same seed and starting head are the same run: equal heads, optimizer state and
// training figures. Without it (the default) the producer acts on while the actor updates, and
// which version acts on which step is a matter of thread timing. Mutation: synchronous ignored
// -> records acted on by an older version (records_behind > 0) and, as a rule, other heads.
TEST_CASE("A synchronous RL job is the same run for the same seed and acts every record by the latest version",
          "[model][rl]") {
  torch::set_num_threads(2);
  model::VLABackbone b(*model::named_backbone("tiny"));
  model::load_weights(*b, test::tiny_weights_path());
  b->freeze();
  env::EnvService envs({.workers = 1});
  struct Outcome {
    model::TenantSlot::Digest start, end;
    rl::RlProgress progress;
  };
  auto run = [&](const std::string& algorithm) {
    model::TenantSlot slot({.kind = "gaussian", .state_dim = 4, .action_dim = 2, .chunk = 1, .hidden = 256},
                           {.lr = 1e-3}, b->config().dim, 11);
    InProcessPolicy policy(b, slot);
    rl::RlConfig config;
    config.algorithm = algorithm;
    config.sessions = 4, config.horizon = 8, config.iterations = 4, config.max_steps = 12, config.group_size = 2;
    config.update.minibatch = 16;
    config.synchronous = true;
    Outcome o{slot.digest(), {}, {}};
    {
      rl::RlJob job("tenant", config, policy, envs);
      while (!job.finished()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      o.progress = job.progress();
    }
    o.end = slot.digest();
    return o;
  };
  for (const std::string algorithm : {"ppo", "grpo"}) {
    INFO(algorithm);
    const auto first = run(algorithm), second = run(algorithm);
    INFO(first.progress.error);
    REQUIRE(first.progress.state == rl::RunState::Done);
    REQUIRE(second.progress.state == rl::RunState::Done);
    CHECK(first.progress.records_behind == 0);
    CHECK(second.progress.records_behind == 0);
    CHECK(first.progress.records_dropped == 0);
    CHECK(first.end.parameters != first.start.parameters);  // the job trained the head
    CHECK(first.end.parameters == second.end.parameters);
    CHECK(first.end.optimizer == second.end.optimizer);
    CHECK(first.end.step == second.end.step);
    CHECK(first.progress.env_steps == second.progress.env_steps);
    CHECK(first.progress.recent_return == second.progress.recent_return);
    CHECK(first.progress.value_loss == second.progress.value_loss);
    CHECK(first.progress.policy_loss == second.progress.policy_loss);
  }
}

TEST_CASE("GRPO raises greedy success and the mean return on reach over the starting policy",
          "[model][rl][learning]") {
  // GRPO's credit is per episode (no value head: every step of an episode carries its return's
  // rank in its group), so it needs far more experience than PPO: at 40 updates of 32 sessions
  // (50 k steps) its return rose but greedy success stayed at 0.01-0.13 over 5 seeds; 160 updates
  // (200 k steps; PPO's check takes 51 k) raise it.
  // Bounds: docs/design/learning-margins.md.
  const auto run = run_rl("grpo", 160, 32, 4);
  CHECK(test::figure_holds("grpo_reach.return_gain", run.after.mean_return - run.before.mean_return, ">=",
                           kGrpoReturnGain));
  CHECK(test::figure_holds("grpo_reach.success_gain", run.after.success - run.before.success, ">=", kGrpoSuccessGain,
                           kEvalEpisodes));
}

// Push from scratch stays at 0% in the demo's 60 updates, and a warm start on the expert's
// demonstrations alone does not survive them: 26% -> 0% (docs/design/env-rl.md). With DAPG's
// behaviour-cloning term on the same demonstrations (RlConfig::demos) the job keeps what the
// warm start learnt. Mutation: weight 0 (no term) ends near 0% and fails the first bound.
TEST_CASE("PPO on push from a warm start on the expert's demonstrations keeps them with the behaviour-cloning term",
          "[model][rl][learning]") {
  torch::set_num_threads(2);
  const std::uint64_t k = test::test_seed();
  model::VLABackbone b(*model::named_backbone("tiny"));
  model::load_weights(*b, test::tiny_weights_path());
  b->freeze();
  const auto demos = test::record_expert("push", 200, 5000 + 100000 * k, b->config(), /*chunk=*/1);
  const auto pooled = test::demo_features(b, demos).pooled;
  const auto n = demos.actions.size(0);
  model::TenantSlot slot({.kind = "gaussian", .state_dim = 4, .action_dim = 2, .chunk = 1, .hidden = 256}, {.lr = 1e-3},
                         b->config().dim, 21 + k);
  env::EnvService envs({.workers = 1});
  InProcessPolicy policy(b, slot);
  const std::uint64_t eval_seed = eval_seed0();
  const auto cold = greedy(envs, b, slot, 0, kEvalEpisodes, eval_seed, false, "push");
  auto pick = at::make_generator<at::CPUGeneratorImpl>(7 + k);
  const int sft_steps = static_cast<int>(env_num("NEXUS_RL_TEST_SFT_STEPS", 3000));
  for (int s = 0; s < sft_steps; ++s) {  // the warm start: SFT on the same demonstrations
    auto idx = torch::randint(n, {32}, pick, torch::kLong);
    slot.sft_step({{}, pooled.index_select(0, idx), {}}, demos.state.index_select(0, idx),
                  demos.actions.index_select(0, idx));
  }
  const auto warm = greedy(envs, b, slot, 0, kEvalEpisodes, eval_seed, false, "push");
  rl::RlConfig config;
  config.task = "push";
  config.seed = 2 + k;
  config.iterations = static_cast<int>(env_num("NEXUS_RL_TEST_ITERATIONS", 60));
  config.demos.weight = env_num("NEXUS_RL_TEST_DEMO_WEIGHT", 1.0);
  config.synchronous = env_num("NEXUS_RL_TEST_SYNC", 1) != 0;
  std::mutex sample_mu;
  config.demos.sample = [&](std::int64_t m) {
    std::lock_guard lk(sample_mu);
    auto idx = torch::randint(n, {m}, pick, torch::kLong);
    return rl::DemoBatch{demos.images.index_select(0, idx), demos.tokens.index_select(0, idx),
                         demos.mask.index_select(0, idx).to(torch::kUInt8), demos.state.index_select(0, idx),
                         demos.actions.index_select(0, idx)};
  };
  std::uint64_t last = 0;
  double demo_loss = 0;
  {
    rl::RlJob job("tenant", config, policy, envs);
    while (!job.finished()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      const auto p = job.progress();
      if (p.iterations % 10 == 0 && p.iterations > 0 && p.iterations != static_cast<int>(last))
        std::fprintf(stderr, "push it=%d success=%.2f return=%.2f pl=%.4f vl=%.4f demo=%.3f %.0fs\n", p.iterations,
                     p.recent_success, p.recent_return, p.policy_loss, p.value_loss, p.demo_loss, p.seconds);
      last = static_cast<std::uint64_t>(p.iterations);
    }
    const auto p = job.progress();
    INFO(p.error);
    REQUIRE(p.state == rl::RunState::Done);
    last = p.version;
    demo_loss = p.demo_loss;
  }
  const auto after = greedy(envs, b, slot, last, kEvalEpisodes, eval_seed, false, "push");
  std::fprintf(stderr, "push: greedy success cold %.2f, warm start %.2f, after PPO with demos %.2f (demo term %.3f)\n",
               cold.success, warm.success, after.success, demo_loss);
  CHECK(demo_loss != 0);  // the term was computed
  // Bounds: docs/design/learning-margins.md.
  CHECK(test::figure_holds("ppo_push_demos.success_over_cold", after.success - cold.success, ">=", 0.05, kEvalEpisodes));
  CHECK(test::figure_holds("ppo_push_demos.success_kept", after.success - warm.success, ">=", -0.15, kEvalEpisodes));
}
