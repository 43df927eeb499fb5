// eval_tenant: read-only evaluation of a published policy version in a built-in simulated task.
// Opens M sessions in nexusd's Environment Service, asks for the pinned version's actions each
// step (the observations land in this tenant's arena and go straight into the predict request),
// reports success rate and mean return, and checks that the tenant's parameters and optimizer
// state are bitwise what they were before (slot digests). With --dataset it instead reports the
// action error (mean L1 of the first action of each chunk) on the file's held-out episodes.
#include <cmath>
#include <cstdio>
#include <cstring>

#include <CLI/CLI.hpp>

#include "datasets/demo_file.hpp"
#include "nexus/client.hpp"

namespace {

// Mean L1 error of the version's first action against the recorded one, over the steps of the
// episodes from `first` on (the held-out split: train on the others).
double heldout_action_error(nexus::Client& client, const nexus::BackboneInfo& bb, const std::string& path,
                            std::size_t first, std::uint64_t version, std::size_t* samples) {
  const auto demos = nexus::datasets::read_demo_file(path);
  const auto& m = demos.meta;
  if (m.image_size != bb.image_size) throw std::runtime_error(path + ": images are not the backbone's size");
  auto images = client.alloc(nexus::DType::UInt8, {1, 1, m.image_size, m.image_size, 3});
  auto tokens = client.alloc(nexus::DType::Int32, {1, bb.max_tokens});
  auto mask = client.alloc(nexus::DType::UInt8, {1, bb.max_tokens});
  auto state = client.alloc(nexus::DType::Float32, {1, m.state_dim});
  const std::size_t image_bytes = images.bytes();
  double total = 0;
  *samples = 0;
  for (std::size_t e = first; e < demos.episodes.size(); ++e) {
    const auto& ep = demos.episodes[e];
    nexus::tokenize(ep.instruction, tokens, mask, 0);
    for (std::int64_t t = 0; t < ep.steps; ++t) {
      std::memcpy(images.raw().data(), ep.images.data() + t * image_bytes, image_bytes);
      std::memcpy(state.raw().data(), ep.proprio.data() + t * m.state_dim, state.bytes());
      const auto p = client.predict({&images, &tokens, &mask, &state}, version);
      for (std::int64_t a = 0; a < m.action_dim; ++a)
        total += std::abs(p.actions[static_cast<std::size_t>(a)] - ep.actions[static_cast<std::size_t>(t * m.action_dim + a)]);
      ++*samples;
    }
  }
  if (*samples == 0) throw std::runtime_error(path + ": no held-out episodes from " + std::to_string(first));
  return total / static_cast<double>(*samples * static_cast<std::size_t>(m.action_dim));
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
  app.add_option("--heldout-from", heldout_from, "the held-out split: episodes from this index on");
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
      std::size_t samples = 0;
      const double error = heldout_action_error(*client, bb, dataset, heldout_from, version, &samples);
      const auto after = client->slot_digest();
      std::printf("{\"tenant\":\"%s\",\"dataset\":\"%s\",\"version\":%llu,\"heldout_samples\":%zu,"
                  "\"action_error\":%.5f,\"unchanged\":%s}\n",
                  opt.tenant.c_str(), dataset.c_str(), static_cast<unsigned long long>(version), samples, error,
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
