#include "expert_demos.hpp"

#include "sim/task.hpp"

namespace nexus::test {

ExpertDemos record_expert(const std::string& task, int episodes, std::uint64_t seed0, const model::BackboneConfig& c,
                          int chunk) {
  auto t = sim::make_task(task, {.image_size = static_cast<int>(c.image_size)});
  std::vector<torch::Tensor> imgs, toks, masks, states, acts;
  for (int e = 0; e < episodes; ++e) {
    t->reset(seed0 + static_cast<std::uint64_t>(e));
    std::vector<std::vector<float>> ep_actions;
    std::vector<torch::Tensor> ep_imgs, ep_states;
    while (!t->done()) {
      auto img = torch::empty({1, c.image_size, c.image_size, 3}, torch::kUInt8);
      t->render(img.data_ptr<std::uint8_t>());
      ep_imgs.push_back(img);
      ep_states.push_back(torch::tensor(t->proprio()));
      const auto a = t->expert_action();
      ep_actions.push_back(a);
      t->step(a);
    }
    const auto n = static_cast<std::int64_t>(ep_actions.size());
    for (std::int64_t i = 0; i < n; ++i) {
      auto actions = torch::empty({chunk, 2});
      for (int k = 0; k < chunk; ++k) {
        const auto& a = ep_actions[static_cast<std::size_t>(std::min<std::int64_t>(i + k, n - 1))];
        actions[k][0] = a[0];
        actions[k][1] = a[1];
      }
      acts.push_back(actions);
      imgs.push_back(ep_imgs[static_cast<std::size_t>(i)]);
      states.push_back(ep_states[static_cast<std::size_t>(i)]);
      auto tok = torch::zeros({1, c.max_tokens}, torch::kInt32);
      auto m = torch::zeros({1, c.max_tokens}, torch::kBool);
      model::tokenize_into(t->instruction(), tok, m, 0);
      toks.push_back(tok);
      masks.push_back(m);
    }
  }
  return {torch::stack(imgs), torch::cat(toks), torch::cat(masks), torch::stack(states), torch::stack(acts)};
}

model::VLAFeature demo_features(model::VLABackbone& b, const ExpertDemos& d) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> tok, pooled, m;
  const auto n = d.images.size(0);
  for (std::int64_t i = 0; i < n; i += 256) {
    const auto len = std::min<std::int64_t>(256, n - i);
    auto f = b->forward(d.images.narrow(0, i, len), d.tokens.narrow(0, i, len), d.mask.narrow(0, i, len));
    tok.push_back(f.tokens);
    pooled.push_back(f.pooled);
    m.push_back(f.mask);
  }
  return {torch::cat(tok), torch::cat(pooled), torch::cat(m)};
}

ExpertDemos record_push_goals(int episodes, std::uint64_t seed0, const model::BackboneConfig& c) {
  auto t = sim::make_task("push", {.image_size = static_cast<int>(c.image_size)});
  std::vector<torch::Tensor> imgs, goals;
  for (int e = 0; e < episodes; ++e) {
    t->reset(seed0 + static_cast<std::uint64_t>(e));
    while (!t->done()) {
      auto img = torch::empty({1, c.image_size, c.image_size, 3}, torch::kUInt8);
      t->render(img.data_ptr<std::uint8_t>());
      imgs.push_back(img);
      const auto g = t->mocap_xy().at(0);  // push's one mocap body is the goal
      goals.push_back(torch::tensor({static_cast<float>(g.first / 0.25), static_cast<float>(g.second / 0.25)}).view({1, 2}));
      t->step(t->expert_action());
    }
  }
  const auto n = static_cast<std::int64_t>(imgs.size());
  ExpertDemos d{torch::stack(imgs), torch::zeros({n, c.max_tokens}, torch::kInt32),
                torch::zeros({n, c.max_tokens}, torch::kBool), {}, torch::stack(goals)};
  for (std::int64_t i = 0; i < n; ++i) model::tokenize_into(t->instruction(), d.tokens, d.mask, i);
  return d;
}

}  // namespace nexus::test
