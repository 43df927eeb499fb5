// The RL arithmetic against numbers worked out by hand (the working is in the comments), so a
// sign, a missing episode-end mask, a biased std or a max for a min fails here, not as a slow
// drift in a learning curve.
#include <catch2/catch.hpp>

#include "daemon/rl/policy_update.hpp"

namespace {

using Catch::Matchers::WithinAbs;

torch::Tensor col(std::initializer_list<float> v) { return torch::tensor(std::vector<float>(v)); }

void require_near(const torch::Tensor& got, std::initializer_list<double> want) {
  auto g = got.to(torch::kDouble).contiguous();
  REQUIRE(g.numel() == static_cast<std::int64_t>(want.size()));
  std::int64_t i = 0;
  for (double w : want) {
    INFO("element " << i);
    CHECK_THAT(g[i].item<double>(), WithinAbs(w, 1e-5));
    ++i;
  }
}

}  // namespace

TEST_CASE("gae matches GAE(lambda) worked by hand, with and without an episode end", "[rl]") {
  // T = 3 steps, two sessions (columns). gamma 0.9, lambda 0.8, so gamma*lambda = 0.72.
  // rewards 1, 0, 2; values 0.5, 0.4, 0.3; value after the last step 0.2.
  auto reward = torch::stack({col({1, 1}), col({0, 0}), col({2, 2})});
  auto value = torch::stack({col({0.5, 0.5}), col({0.4, 0.4}), col({0.3, 0.3})});
  // Session 0 runs on; session 1's episode ends at step 1 (no bootstrap from step 2's value).
  auto done = torch::stack({col({0, 0}), col({0, 1}), col({0, 0})});
  auto last = col({0.2, 0.2});
  auto [adv, ret] = nexus::rl::gae(reward, value, done, last, 0.9, 0.8);
  // Session 0:  d2 = 2 + 0.9*0.2 - 0.3 = 1.88                 A2 = 1.88
  //             d1 = 0 + 0.9*0.3 - 0.4 = -0.13                A1 = -0.13 + 0.72*1.88   = 1.2236
  //             d0 = 1 + 0.9*0.4 - 0.5 = 0.86                 A0 = 0.86 + 0.72*1.2236  = 1.740992
  require_near(adv.select(1, 0), {1.740992, 1.2236, 1.88});
  require_near(ret.select(1, 0), {2.240992, 1.6236, 2.18});  // A + V
  // Session 1:  A2 = 1.88 as before (a new episode bootstraps from the last value);
  //             d1 = 0 + 0 - 0.4 = -0.4, and nothing flows back across the end: A1 = -0.4
  //             A0 = 0.86 + 0.72*(-0.4) = 0.572
  require_near(adv.select(1, 1), {0.572, -0.4, 1.88});
}

TEST_CASE("gae bootstraps a truncated episode from its true last observation's value, worked by hand", "[rl]") {
  // As above, but session 1's episode was cut short by the episode limit at step 1 (truncated, not
  // terminated): its true last observation, replaced by the reset, was worth 0.6.
  auto reward = torch::stack({col({1, 1}), col({0, 0}), col({2, 2})});
  auto value = torch::stack({col({0.5, 0.5}), col({0.4, 0.4}), col({0.3, 0.3})});
  auto done = torch::stack({col({0, 0}), col({0, 1}), col({0, 0})});
  auto cut = torch::stack({col({0, 0}), col({0, 0.6}), col({0, 0})});
  auto [adv, ret] = nexus::rl::gae(reward, value, done, col({0.2, 0.2}), 0.9, 0.8, cut);
  require_near(adv.select(1, 0), {1.740992, 1.2236, 1.88});  // session 0: no cut, as before
  // Session 1:  A2 = 1.88 (the next episode);
  //             d1 = 0 + 0.9*0.6 - 0.4 = 0.14, and still nothing flows back across the end: A1 = 0.14
  //             A0 = 0.86 + 0.72*0.14 = 0.9608
  require_near(adv.select(1, 1), {0.9608, 0.14, 1.88});
  require_near(ret.select(1, 1), {1.4608, 0.54, 2.18});
}

TEST_CASE("group_relative centres and scales each group by its own population std", "[rl]") {
  // Groups of 3: {1, 2, 3} has mean 2 and population std sqrt(2/3) = 0.816497, so +-1.224745;
  // {5, 5, 5} has no spread: every advantage 0 (the epsilon keeps it finite).
  auto adv = nexus::rl::group_relative(col({1, 2, 3, 5, 5, 5}), 3);
  require_near(adv, {-1.224744, 0, 1.224744, 0, 0, 0});
  // Groups of 2 over the same returns are different groups: {1, 2} -> -+1, {3, 5} -> -+1, {5, 5} -> 0.
  require_near(nexus::rl::group_relative(col({1, 2, 3, 5, 5, 5}), 2), {-1, 1, -1, 1, 0, 0});
}

TEST_CASE("the clipped surrogate takes the pessimistic side of the clip", "[rl]") {
  // ratios 0.5, 1, 1.5, 1.5, 0.5 (log-prob differences are their logs); clip 0.2.
  auto ratio = col({0.5, 1.0, 1.5, 1.5, 0.5});
  auto old = col({-1.0, -2.0, -0.5, -3.0, -1.5});
  auto lp = old + ratio.log();
  auto adv = col({1, 1, 1, -1, -1});
  // A = +1: min(r, clip(r)) -> 0.5 (below the clip, not lifted), 1, 1.2 (gain capped at 1+eps)
  // A = -1: min(-r, -clip(r)) -> -1.5 (loss not capped), -0.8 (0.5 clipped up to 0.8 costs more)
  require_near(nexus::rl::clipped_surrogate(lp, old, adv, 0.2), {0.5, 1.0, 1.2, -1.5, -0.8});
  // Inside the clip the surrogate is r*A exactly, and its gradient is A*r per sample.
  auto lp2 = torch::log(col({0.9, 1.1})).requires_grad_(true);
  auto s = nexus::rl::clipped_surrogate(lp2, torch::zeros({2}), col({2, -3}), 0.2);
  s.sum().backward();
  require_near(s.detach(), {1.8, -3.3});
  require_near(lp2.grad(), {1.8, -3.3});
  // Outside it, no gradient pushes the ratio further: r = 1.5 with A = +1 is flat.
  auto lp3 = torch::log(col({1.5})).requires_grad_(true);
  nexus::rl::clipped_surrogate(lp3, torch::zeros({1}), col({1}), 0.2).sum().backward();
  require_near(lp3.grad(), {0});
}
