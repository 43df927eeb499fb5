// eval_tenant: read-only evaluation of a published policy version in a built-in simulated task.
// Opens M sessions in nexusd's Environment Service, asks for the pinned version's actions each
// step (the observations land in this tenant's arena and go straight into the predict request),
// reports success rate and mean return, and checks that the tenant's parameters and optimizer
// state are bitwise what they were before (slot digests). With --dataset it instead reports the
// action error (mean L1 of the first action of each chunk) on the file's held-out episodes, beside
// the error of always predicting the training demos' mean action.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <CLI/CLI.hpp>

#include "datasets/demo_file.hpp"
#include "datasets/normalizer.hpp"
#include "nexus/client.hpp"

namespace {

struct HeldOut {
  double error = 0, mean_baseline = 0;  // mean L1 per action column, in the file's units
  std::size_t samples = 0;
};

// Mean L1 error of the version's first action against the recorded one over the held-out
// episodes: the file's /mask/valid demos when it has masks, else those from `first` on (train on
// the others). The baseline predicts the training demos' mean action (`train_path`'s when given,
// else this file's non-held-out demos). The file is read here with
// the same options nexusd reads it with (views resized to the backbone's size). With `normalized`
// the dataset is also loaded into nexusd, and predictions name it: state in, actions out in the
// file's units.
HeldOut heldout_action_error(nexus::Client& client, const nexus::BackboneInfo& bb, const std::string& path,
                             const std::string& train_path, nexus::datasets::ReadOptions read, std::size_t first,
                             std::uint64_t version, bool normalized) {
  read.image_size = bb.image_size;
  auto demos = nexus::datasets::read_demo_file(path, read);
  const auto& m = demos.meta;
  if (!m.has_masks)
    for (std::size_t e = 0; e < demos.episodes.size(); ++e) demos.episodes[e].valid = e >= first;
  std::vector<float> mean;  // empty: no training demos to take a mean from (a separate held-out file)
  if (train_path.empty()) {
    for (auto& e : demos.episodes) e.train = e.train && !e.valid;
    if (std::any_of(demos.episodes.begin(), demos.episodes.end(), [](const auto& e) { return e.train; }))
      mean = nexus::datasets::compute_normalizer(demos).action.mean;
  } else {
    mean = nexus::datasets::compute_normalizer(nexus::datasets::read_demo_file(train_path, read)).action.mean;
  }
  std::string dataset;
  if (normalized) {  // nexusd's statistics of the file the head was trained on
    nexus::DatasetOptions o;
    o.views = read.views, o.state_keys = read.state_keys, o.instruction = read.instruction, o.normalize = true;
    client.dataset_load("heldout-units", train_path.empty() ? path : train_path, o);
    dataset = "heldout-units";
  }
  const auto views = static_cast<std::int64_t>(m.views.size());
  auto images = client.alloc(nexus::DType::UInt8, {1, views, m.image_size, m.image_size, 3});
  auto tokens = client.alloc(nexus::DType::Int32, {1, bb.max_tokens});
  auto mask = client.alloc(nexus::DType::UInt8, {1, bb.max_tokens});
  auto state = client.alloc(nexus::DType::Float32, {1, m.state_dim});
  const std::size_t image_bytes = images.bytes();
  HeldOut out;
  for (const auto& ep : demos.episodes) {
    if (!ep.valid) continue;
    nexus::tokenize(ep.instruction, tokens, mask, 0);
    for (std::int64_t t = 0; t < ep.steps; ++t) {
      std::memcpy(images.raw().data(), ep.images.data() + t * image_bytes, image_bytes);
      std::memcpy(state.raw().data(), ep.proprio.data() + t * m.state_dim, state.bytes());
      const auto p = client.predict({&images, &tokens, &mask, m.state_dim > 0 ? &state : nullptr}, version, dataset);
      for (std::int64_t a = 0; a < m.action_dim; ++a) {
        const float want = ep.actions[static_cast<std::size_t>(t * m.action_dim + a)];
        out.error += std::abs(p.actions[static_cast<std::size_t>(a)] - want);
        if (!mean.empty()) out.mean_baseline += std::abs(mean[static_cast<std::size_t>(a)] - want);
      }
      ++out.samples;
    }
  }
  if (out.samples == 0) throw std::runtime_error(path + ": no held-out episodes");
  const auto n = static_cast<double>(out.samples * static_cast<std::size_t>(m.action_dim));
  out.error /= n;
  out.mean_baseline = mean.empty() ? NAN : out.mean_baseline / n;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"eval_tenant: evaluate a pinned policy version, read-only"};
  nexus::ClientOptions opt;
  std::string task = "reach";
  int episodes = 50;
  std::uint64_t version = 0, seed = 90000;
  app.add_option("-s,--socket", opt.socket_path, "nexusd control socket");
  app.add_option("-t,--tenant", opt.tenant, "the tenant whose policy to evaluate")->required();
  app.add_option("--task", task, "reach or push");
  app.add_option("--episodes", episodes, "episodes (run side by side)")->check(CLI::Range(1, 256));
  auto* version_option = app.add_option("--version", version, "published policy version (default: the latest; 0: the live head, on purpose only)");
  app.add_option("--seed", seed, "episode i is reset with seed + i");
  std::string dataset;
  std::size_t heldout_from = 0;
  app.add_option("--dataset", dataset, "instead of episodes: action error on this file's held-out episodes");
  app.add_option("--heldout-from", heldout_from, "without /mask/valid in the file: episodes from this index on");
  nexus::datasets::ReadOptions read;
  bool normalized = false;
  app.add_option("--views", read.views, "the dataset's camera keys (default: its layout's)")->delimiter(',');
  app.add_option("--state-keys", read.state_keys, "the dataset's proprio keys (default: its layout's)")->delimiter(',');
  app.add_option("--instruction", read.instruction, "for files whose demos name none");
  app.add_flag("--normalize", normalized, "the head was trained on the file's normalised actions and state");
  std::string train_dataset;
  app.add_option("--train-dataset", train_dataset,
                 "the file the head was trained on, when --dataset is a separate held-out file (its training "
                 "demos give the mean baseline and, with --normalize, the statistics)");
  CLI11_PARSE(app, argc, argv);
  opt.client_arena_bytes = 32 << 20;
  opt.timeout = std::chrono::seconds(60);
  try {
    auto client = nexus::Client::attach(opt);
    const auto before = client->slot_digest();
    if (version_option->count() == 0) {  // evaluation pins a published version by default
      version = before.latest_version;
      if (version == 0)
        throw std::runtime_error("nothing published to evaluate: publish a version first (or pass --version 0 for "
                                 "the live head)");
    }
    const auto bb = client->backbone();
    if (!dataset.empty()) {
      const auto h = heldout_action_error(*client, bb, dataset, train_dataset, read, heldout_from, version, normalized);
      const auto after = client->slot_digest();
      std::printf("{\"tenant\":\"%s\",\"dataset\":\"%s\",\"version\":%llu,\"heldout_samples\":%zu,"
                  "\"action_error\":%.5f,\"mean_baseline_error\":%s,\"unchanged\":%s}\n",
                  opt.tenant.c_str(), dataset.c_str(), static_cast<unsigned long long>(version), h.samples, h.error,
                  std::isnan(h.mean_baseline) ? "null" : std::to_string(h.mean_baseline).c_str(),
                  before == after ? "true" : "false");
      return before == after ? 0 : 3;
    }
    const auto envs = client->env_open(task, episodes);
    const std::int64_t n = episodes;
    auto images = client->alloc(nexus::DType::UInt8, {n, 1, bb.image_size, bb.image_size, 3});
    auto tokens = client->alloc(nexus::DType::Int32, {n, bb.max_tokens});
    auto mask = client->alloc(nexus::DType::UInt8, {n, bb.max_tokens});
    auto state = client->alloc(nexus::DType::Float32, {n, envs.state_dim});
    std::vector<std::uint64_t> seeds;
    for (int e = 0; e < episodes; ++e) seeds.push_back(seed + static_cast<std::uint64_t>(e));
    auto r = client->env_reset(envs.ids, seeds, images, state);
    std::vector<bool> done(envs.ids.size(), false), success(envs.ids.size(), false);
    std::vector<double> returns(envs.ids.size(), 0.0);
    for (int t = 0; t < envs.max_steps; ++t) {
      for (std::int64_t i = 0; i < n; ++i)
        if (!done[static_cast<std::size_t>(i)]) nexus::tokenize(r.instructions[static_cast<std::size_t>(i)], tokens, mask, i);
      const auto pred = client->predict({&images, &tokens, &mask, &state}, version);
      const std::size_t per_sample = pred.actions.size() / static_cast<std::size_t>(n);  // chunk * action_dim
      std::vector<float> actions;
      for (std::int64_t i = 0; i < n; ++i)  // receding horizon: the chunk's first action
        actions.insert(actions.end(), pred.actions.begin() + static_cast<long>(i * per_sample),
                       pred.actions.begin() + static_cast<long>(i * per_sample) + envs.action_dim);
      // Finished episodes answer "reset first" and keep their last observation: ignored here.
      const auto step = client->env_step(envs.ids, actions, images, state);
      for (std::size_t i = 0; i < envs.ids.size(); ++i) {
        if (done[i]) continue;
        if (step.failed[i]) throw std::runtime_error(step.errors[i]);
        returns[i] += step.reward[i];
        done[i] = step.done[i];
        success[i] = step.success[i];
        r.instructions[i] = step.instructions[i];
      }
      if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    }
    client->env_close(envs.ids);
    const auto after = client->slot_digest();
    int successes = 0;
    double mean_return = 0;
    for (std::size_t i = 0; i < envs.ids.size(); ++i) {
      successes += success[i];
      mean_return += returns[i] / static_cast<double>(envs.ids.size());
    }
    std::printf("{\"tenant\":\"%s\",\"task\":\"%s\",\"version\":%llu,\"episodes\":%d,\"success_rate\":%.4f,"
                "\"mean_return\":%.4f,\"unchanged\":%s,\"parameters\":\"%016llx\",\"optimizer\":\"%016llx\"}\n",
                opt.tenant.c_str(), task.c_str(), static_cast<unsigned long long>(version), episodes,
                double(successes) / episodes, mean_return, before == after ? "true" : "false",
                static_cast<unsigned long long>(after.parameters), static_cast<unsigned long long>(after.optimizer));
    return before == after ? 0 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eval_tenant %s: %s\n", opt.tenant.c_str(), e.what());
    return 1;
  }
}
