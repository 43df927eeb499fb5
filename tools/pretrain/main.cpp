// nexus-pretrain: teaches the built-in backbone to ground instructions in procedurally generated
// scenes (where is the object the instruction names, what colour and shape is it; and, densely,
// what colour lies under each patch), on the CPU,
// and saves the weights as safetensors plus a report (JSON; scripts/plot_report.py draws it).
//
// Why: a randomly initialised frozen backbone is useless to a head (see issue "Resident
// backbone"): its pooled features do not say where the named object is. The grounding loss is
// read from the pooled (CLS) feature, which is what the tenants' heads consume.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "daemon/model/backbone.hpp"
#include "grounding.hpp"

using namespace nexus;

int main(int argc, char** argv) {
  CLI::App app{"nexus-pretrain: grounding pretraining of the built-in VLA backbone"};
  std::string size = "tiny", out, report_path;
  int steps = 1500, batch = 64, eval_every = 250, heldout = 512;
  double lr = 1e-3, clip = 0;
  std::uint64_t seed = 7;
  app.add_option("--size", size, "backbone size: tiny or small");
  app.add_option("--steps", steps, "optimizer steps");
  app.add_option("--batch", batch, "scenes per step");
  app.add_option("--lr", lr, "AdamW learning rate");
  app.add_option("--clip", clip, "gradient-norm clipping (0: none)");
  app.add_option("--seed", seed, "scene generator seed (held-out scenes use another)");
  app.add_option("--eval-every", eval_every, "steps between held-out evaluations");
  app.add_option("--heldout", heldout, "held-out scenes");
  app.add_option("-o,--out", out, "weights file (.safetensors)")->required();
  app.add_option("--report", report_path, "report file (.json)");
  CLI11_PARSE(app, argc, argv);
  auto config = model::named_backbone(size);
  if (!config) {
    std::fprintf(stderr, "nexus-pretrain: unknown size '%s' (tiny, small)\n", size.c_str());
    return 2;
  }
  torch::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));

  model::VLABackbone backbone(*config);
  torch::manual_seed(seed);
  torch::nn::Linear readout(config->dim, pretrain::kGroundingOutputs);
  torch::nn::Linear patch_readout(config->dim, pretrain::kPatchClasses);
  std::vector<torch::Tensor> params = backbone->parameters();
  for (auto& p : readout->parameters()) params.push_back(p);
  for (auto& p : patch_readout->parameters()) params.push_back(p);
  const std::int64_t patches = config->patches_per_view();
  auto patch_logits = [&](const model::VLAFeature& f) { return patch_readout(f.tokens.slice(1, 1, 1 + patches)); };
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(lr).weight_decay(0.01));

  synth::SceneGenerator train_scenes(seed, {.image_size = static_cast<int>(config->image_size)});
  synth::SceneGenerator eval_scenes(seed + 1'000'003, {.image_size = static_cast<int>(config->image_size)});
  const auto eval_batch = pretrain::make_batch(eval_scenes, *config, heldout);

  nlohmann::json report = {{"backbone", size}, {"steps", steps}, {"batch", batch}, {"lr", lr}, {"clip", clip}, {"seed", seed},
                           {"parameters", 0}, {"train_loss", nlohmann::json::array()},
                           {"heldout", nlohmann::json::array()}};
  std::int64_t n_params = 0;
  for (auto& p : backbone->parameters()) n_params += p.numel();
  report["parameters"] = n_params;
  std::fprintf(stderr, "[pretrain] %s backbone, %lld parameters, %d steps of %d scenes\n", size.c_str(),
               static_cast<long long>(n_params), steps, batch);

  auto evaluate = [&](int step) {
    torch::NoGradGuard no_grad;
    backbone->eval();
    const auto f = backbone->forward(eval_batch.images, eval_batch.tokens, eval_batch.mask);
    const auto m = pretrain::grounding_metrics(readout(f.pooled), patch_logits(f), eval_batch);
    backbone->train();
    report["heldout"].push_back({{"step", step}, {"loss", m.loss}, {"xy_l1", m.xy_l1},
                                 {"baseline_xy_l1", m.baseline_xy_l1}, {"color_accuracy", m.color_accuracy},
                                 {"shape_accuracy", m.shape_accuracy}});
    return m;
  };

  const auto t0 = std::chrono::steady_clock::now();
  double running = 0;
  for (int step = 1; step <= steps; ++step) {
    const auto b = pretrain::make_batch(train_scenes, *config, batch);
    const auto f = backbone->forward(b.images, b.tokens, b.mask);
    auto loss = pretrain::grounding_loss(readout(f.pooled), patch_logits(f), b);
    opt.zero_grad();
    loss.backward();
    if (clip > 0) torch::nn::utils::clip_grad_norm_(params, clip);
    opt.step();
    running = step == 1 ? loss.item<double>() : 0.95 * running + 0.05 * loss.item<double>();
    if (step % 10 == 0) report["train_loss"].push_back({{"step", step}, {"loss", running}});
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step % eval_every == 0 || step == steps) {
      const auto m = evaluate(step);
      std::fprintf(stderr,
                   "[pretrain] step %5d/%d  loss %.3f  held-out: xy L1 %.4f (mean baseline %.4f, %.1fx better), "
                   "colour %.0f%%, shape %.0f%%  %.0f s, eta %.0f s\n",
                   step, steps, running, m.xy_l1, m.baseline_xy_l1, m.baseline_xy_l1 / m.xy_l1,
                   100 * m.color_accuracy, 100 * m.shape_accuracy, secs, secs / step * (steps - step));
    } else if (step % 50 == 0) {
      std::fprintf(stderr, "[pretrain] step %5d/%d  loss %.3f  %.0f s\n", step, steps, running, secs);
    }
  }
  const auto& last = report["heldout"].back();
  report["final"] = last;
  report["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  model::save_weights(*backbone, out,
                      {{"nexus.backbone", size}, {"nexus.recipe", "grounding-v1"},
                       {"nexus.heldout_xy_l1", std::to_string(last["xy_l1"].get<double>())}});
  if (!report_path.empty()) std::ofstream(report_path) << report.dump(2) << "\n";
  std::fprintf(stderr, "[pretrain] wrote %s\n", out.c_str());
  return 0;
}
