// sft_demos_tenant: supervised fine-tuning from recorded demonstrations (a robomimic/LIBERO HDF5
// file, e.g. from `nexusctl dataset record`). Hands the file to nexusd (opened here, with this
// user's permissions), lets the daemon sample batches of (camera views, instruction, proprio
// state, action chunk) from its training demos for each step on its resident backbone, publishes
// a policy version, prints one JSON line. --views / --state-keys name other layouts' keys;
// --normalize trains on the file's normalised actions and state.
#include <cmath>
#include <chrono>
#include <cstdio>

#include <CLI/CLI.hpp>

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
  app.add_option("--token-queries", spec.head.token_queries,
                 "mlp_chunk/gaussian: learned queries over the feature tokens (a task about two objects, as push)")
      ->check(CLI::Range(0, 16));
  app.add_option("--adapter-rank", spec.head.adapter.rank,
                 "also train a low-rank adapter of this rank on every block of the backbone (0: the head alone)")
      ->check(CLI::Range(0, 64));
  app.add_option("--steps", steps, "SFT steps");
  app.add_option("--batch", batch, "samples per step")->check(CLI::Range(1, 4096));
  app.add_option("--lr", spec.optimizer.lr, "AdamW learning rate");
  app.add_option("--seed", spec.seed, "head initialisation and sampling seed");
  app.add_option("--report-every", report_every, "progress line every N steps (0: none)");
  nexus::DatasetOptions data_options;
  app.add_option("--views", data_options.views, "camera keys under obs/ (default: the file's layout)")->delimiter(',');
  app.add_option("--state-keys", data_options.state_keys, "proprio keys under obs/ (default: the layout's)")
      ->delimiter(',');
  app.add_flag("--normalize", data_options.normalize, "train on actions and state normalised by the file's statistics");
  app.add_option("--instruction", data_options.instruction, "for files whose demos name none");
  spec.head.chunk = 4;
  CLI11_PARSE(app, argc, argv);
  // A step's reply can be long in coming on a busy box, and that is fair share, not a fault:
  // an adapter tenant's step costs several head-only steps, so it waits while five neighbours
  // catch up (seen: over 60 s, in a fresh root building on the same two cores). The deadline
  // is for a daemon that is gone, and that is seen sooner (DaemonGone).
  opt.timeout = std::chrono::seconds(300);
  auto refuse = [&](const char* code, const std::exception& e) {
    std::fprintf(stderr, "sft_demos_tenant %s: %s\n", opt.tenant.c_str(), e.what());
    std::printf("{\"tenant\":\"%s\",\"error\":\"%s\"}\n", opt.tenant.c_str(), code);
    return 2;
  };
  try {
    auto client = nexus::Client::attach(opt);
    data_options.seed = spec.seed;
    const auto data = client->dataset_load("demos", path, data_options);
    spec.views = static_cast<std::int32_t>(data.views.size());
    spec.head.state_dim = data.state_dim;
    spec.head.action_dim = data.action_dim;
    spec.head.flow_noise = 0.3;  // the recorded (or normalised) actions span about [-1, 1]
    client->register_tenant(spec);
    double first = NAN, last = NAN;
    const auto started = std::chrono::steady_clock::now();
    for (int step = 1; step <= steps; ++step) {
      const auto r = client->dataset_sft_step("demos", batch, spec.head.chunk);
      if (step == 1) first = r.loss;
      last = r.loss;
      if (report_every > 0 && (step % report_every == 0 || step == steps))
        std::fprintf(stderr, "[%s] sft %s step %d/%d  %.1f steps/s  loss %.4f\n", opt.tenant.c_str(),
                     spec.head.kind.c_str(), step, steps,
                     step / std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), r.loss);
    }
    const auto version = client->publish();
    auto number = [](double v) { return std::isnan(v) ? std::string("null") : std::to_string(v); };
    std::printf("{\"tenant\":\"%s\",\"head\":\"%s\",\"adapter_rank\":%d,\"dataset\":\"%s\",\"layout\":\"%s\",\"views\":%d,"
                "\"state_dim\":%d,\"demos\":%u,\"valid_demos\":%u,\"samples\":%llu,\"steps\":%d,"
                "\"first_loss\":%s,\"last_loss\":%s,\"version\":%llu}\n",
                opt.tenant.c_str(), spec.head.kind.c_str(), spec.head.adapter.rank, path.c_str(), data.layout.c_str(), spec.views,
                data.state_dim, data.episodes, data.valid_episodes,
                static_cast<unsigned long long>(data.samples), steps, number(first).c_str(), number(last).c_str(),
                static_cast<unsigned long long>(version));
  } catch (const nexus::Error& e) {
    if (e.code() == nexus::ErrorCode::BadDataset) return refuse("BadDataset", e);
    if (e.code() == nexus::ErrorCode::PermissionDenied) return refuse("PermissionDenied", e);
    std::fprintf(stderr, "sft_demos_tenant %s: %s\n", opt.tenant.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sft_demos_tenant %s: %s\n", opt.tenant.c_str(), e.what());
    return 1;
  }
  return 0;
}
