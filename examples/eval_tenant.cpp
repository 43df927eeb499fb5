// eval_tenant: read-only evaluation of a published policy version in a built-in simulated task.
// Opens M sessions in nexusd's Environment Service, asks for the pinned version's actions each
// step (the observations land in this tenant's arena and go straight into the predict request),
// reports success rate and mean return, and checks that the tenant's parameters and optimizer
// state are bitwise what they were before (slot digests).
#include <cstdio>

#include <CLI/CLI.hpp>

#include "nexus/client.hpp"

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
  app.add_option("--version", version, "published policy version (0: the live head)");
  app.add_option("--seed", seed, "episode i is reset with seed + i");
  CLI11_PARSE(app, argc, argv);
  opt.client_arena_bytes = 32 << 20;
  opt.timeout = std::chrono::seconds(60);
  try {
    auto client = nexus::Client::attach(opt);
    const auto before = client->slot_digest();
    const auto bb = client->backbone();
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
