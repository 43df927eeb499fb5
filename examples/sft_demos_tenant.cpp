// sft_demos_tenant: supervised fine-tuning from recorded demonstrations (a robomimic/LIBERO HDF5
// file, e.g. from `nexusctl dataset record`). Reads the file, samples batches of (camera image,
// instruction, proprio state, action chunk) into the shared arena, trains a head on nexusd's
// resident backbone, publishes a policy version, prints one JSON line.
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include <CLI/CLI.hpp>

#include "datasets/demo_file.hpp"
#include "nexus/client.hpp"

int main(int argc, char** argv) {
  CLI::App app{"sft_demos_tenant: SFT from a demonstration file through nexusd"};
  nexus::ClientOptions opt;
  nexus::TenantSpec spec;
  std::string path;
  int steps = 3000, batch = 64, report_every = 500;
  app.add_option("-s,--socket", opt.socket_path, "nexusd control socket");
  app.add_option("-t,--tenant", opt.tenant, "tenant name")->required();
  app.add_option("--dataset", path, "demonstrations (.hdf5)")->required();
  app.add_option("--head", spec.head.kind, "mlp_chunk, flow or gaussian");
  app.add_option("--chunk", spec.head.chunk, "actions per prediction")->check(CLI::Range(1, 64));
  app.add_option("--steps", steps, "SFT steps");
  app.add_option("--batch", batch, "samples per step");
  app.add_option("--lr", spec.optimizer.lr, "AdamW learning rate");
  app.add_option("--seed", spec.seed, "head initialisation and sampling seed");
  app.add_option("--report-every", report_every, "progress line every N steps (0: none)");
  spec.head.chunk = 4;
  CLI11_PARSE(app, argc, argv);
  opt.client_arena_bytes = 32 << 20;
  opt.timeout = std::chrono::seconds(60);
  try {
    const auto demos = nexus::datasets::read_demo_file(path);
    const auto& m = demos.meta;
    spec.head.state_dim = static_cast<std::int32_t>(m.state_dim);
    spec.head.action_dim = static_cast<std::int32_t>(m.action_dim);
    spec.head.flow_noise = 0.3;  // the recorded actions span [-1, 1]
    auto client = nexus::Client::attach(opt);
    const auto bb = client->register_tenant(spec);
    if (bb.image_size != m.image_size)
      throw std::runtime_error("the dataset's images are " + std::to_string(m.image_size) + " px, the backbone's " +
                               std::to_string(bb.image_size));
    const std::int64_t n = batch, chunk = spec.head.chunk, ad = m.action_dim, sd = m.state_dim;
    const std::size_t image_bytes = static_cast<std::size_t>(m.image_size * m.image_size * 3);
    auto images = client->alloc(nexus::DType::UInt8, {n, 1, m.image_size, m.image_size, 3});
    auto tokens = client->alloc(nexus::DType::Int32, {n, bb.max_tokens});
    auto mask = client->alloc(nexus::DType::UInt8, {n, bb.max_tokens});
    auto state = client->alloc(nexus::DType::Float32, {n, sd});
    auto actions = client->alloc(nexus::DType::Float32, {n, chunk, ad});
    std::vector<std::pair<std::size_t, std::int64_t>> index;  // (episode, step)
    for (std::size_t e = 0; e < demos.episodes.size(); ++e)
      for (std::int64_t t = 0; t < demos.episodes[e].steps; ++t) index.emplace_back(e, t);
    std::mt19937_64 rng(spec.seed);
    double first = NAN, last = NAN;
    const auto started = std::chrono::steady_clock::now();
    for (int step = 1; step <= steps; ++step) {
      for (std::int64_t i = 0; i < n; ++i) {  // written in place: the daemon reads these bytes
        const auto [e, t] = index[rng() % index.size()];
        const auto& ep = demos.episodes[e];
        std::memcpy(images.raw().data() + i * image_bytes, ep.images.data() + t * image_bytes, image_bytes);
        nexus::tokenize(ep.instruction, tokens, mask, i);
        std::memcpy(state.as<float>().data() + i * sd, ep.proprio.data() + t * sd, sd * sizeof(float));
        for (std::int64_t k = 0; k < chunk; ++k)  // the chunk runs on past the end as its last action
          std::memcpy(actions.as<float>().data() + (i * chunk + k) * ad,
                      ep.actions.data() + std::min(t + k, ep.steps - 1) * ad, ad * sizeof(float));
      }
      const auto r = client->sft_step({&images, &tokens, &mask, &state}, actions);
      if (step == 1) first = r.loss;
      last = r.loss;
      if (report_every > 0 && (step % report_every == 0 || step == steps))
        std::fprintf(stderr, "[%s] sft %s step %d/%d  %.1f steps/s  loss %.4f\n", opt.tenant.c_str(),
                     spec.head.kind.c_str(), step, steps,
                     step / std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), r.loss);
    }
    const auto version = client->publish();
    auto number = [](double v) { return std::isnan(v) ? std::string("null") : std::to_string(v); };
    std::printf("{\"tenant\":\"%s\",\"head\":\"%s\",\"dataset\":\"%s\",\"demos\":%zu,\"samples\":%zu,\"steps\":%d,"
                "\"first_loss\":%s,\"last_loss\":%s,\"version\":%llu}\n",
                opt.tenant.c_str(), spec.head.kind.c_str(), path.c_str(), demos.episodes.size(), index.size(), steps,
                number(first).c_str(), number(last).c_str(), static_cast<unsigned long long>(version));
  } catch (const nexus::datasets::DatasetError& e) {
    std::fprintf(stderr, "sft_demos_tenant: bad dataset: %s\n", e.what());
    std::printf("{\"tenant\":\"%s\",\"error\":\"BadDataset\"}\n", opt.tenant.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sft_demos_tenant %s: %s\n", opt.tenant.c_str(), e.what());
    return 1;
  }
  return 0;
}
