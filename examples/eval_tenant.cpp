// eval_tenant: read-only evaluation of a published policy version in a built-in simulated task.
// Runs M episodes (in this process's own simulator) asking nexusd for the pinned version's
// actions each step, reports success rate and mean return, and checks that the tenant's
// parameters and optimizer state are bitwise what they were before (slot digests).
#include <cstdio>

#include <CLI/CLI.hpp>

#include "nexus/client.hpp"
#include "sim/task.hpp"

int main(int argc, char** argv) {
  CLI::App app{"eval_tenant: evaluate a pinned policy version, read-only"};
  nexus::ClientOptions opt;
  std::string task = "reach";
  int episodes = 50;
  std::uint64_t version = 0, seed = 90000;
  app.add_option("-s,--socket", opt.socket_path, "nexusd control socket");
  app.add_option("-t,--tenant", opt.tenant, "the tenant whose policy to evaluate")->required();
  app.add_option("--task", task, "reach or push");
  app.add_option("--episodes", episodes, "episodes (run side by side)")->check(CLI::Range(1, 1024));
  app.add_option("--version", version, "published policy version (0: the live head)");
  app.add_option("--seed", seed, "episode i is reset with seed + i");
  CLI11_PARSE(app, argc, argv);
  opt.client_arena_bytes = 32 << 20;
  opt.timeout = std::chrono::seconds(60);
  try {
    auto client = nexus::Client::attach(opt);
    const auto before = client->slot_digest();
    const auto bb = client->backbone();
    std::vector<std::unique_ptr<nexus::sim::Task>> envs;
    for (int e = 0; e < episodes; ++e) {
      envs.push_back(nexus::sim::make_task(task, {.image_size = bb.image_size}));
      envs.back()->reset(seed + static_cast<std::uint64_t>(e));
    }
    const std::int64_t n = episodes, sd = nexus::sim::Task::kStateDim;
    auto images = client->alloc(nexus::DType::UInt8, {n, 1, bb.image_size, bb.image_size, 3});
    auto tokens = client->alloc(nexus::DType::Int32, {n, bb.max_tokens});
    auto mask = client->alloc(nexus::DType::UInt8, {n, bb.max_tokens});
    auto state = client->alloc(nexus::DType::Float32, {n, sd});
    std::vector<double> returns(envs.size(), 0.0);
    for (int t = 0;; ++t) {
      bool live = false;
      for (std::int64_t i = 0; i < n; ++i) {  // finished episodes keep their rows: ignored below
        auto& env = *envs[static_cast<std::size_t>(i)];
        if (env.done()) continue;
        live = true;
        env.render(images.raw().data() + i * bb.image_size * bb.image_size * 3);
        nexus::tokenize(env.instruction(), tokens, mask, i);
        const auto p = env.proprio();
        std::copy(p.begin(), p.end(), state.as<float>().begin() + i * sd);
      }
      if (!live) break;
      const auto pred = client->predict({&images, &tokens, &mask, &state}, version);
      const std::size_t per_sample = pred.actions.size() / static_cast<std::size_t>(n);  // chunk * action_dim
      for (std::size_t i = 0; i < envs.size(); ++i)
        if (!envs[i]->done())  // receding horizon: the chunk's first action
          returns[i] += envs[i]->step({pred.actions.data() + i * per_sample, nexus::sim::Task::kActionDim}).reward;
    }
    const auto after = client->slot_digest();
    int successes = 0;
    double mean_return = 0;
    for (std::size_t i = 0; i < envs.size(); ++i) {
      successes += envs[i]->success();
      mean_return += returns[i] / static_cast<double>(envs.size());
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
