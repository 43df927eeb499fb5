// features_tenant: a head that lives in the tenant's own process (features mode). It registers a
// region of its own memory with nexusd, renders synthetic reach scenes into it, asks nexusd for
// the frozen backbone's features of them (written back into the same region), and fits its own
// head on those features here: ridge regression from pooled features to the first reach action.
// Prints one JSON line: held-out error against predicting the training mean.
// Needs a nexusd with [ipc] allow_device_regions (nexusd --allow-device-regions).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include <CLI/CLI.hpp>

#include "nexus/client.hpp"
#include "synth/scenes.hpp"

namespace {

constexpr int kActionDim = 2;

// Where one batch's tensors lie in the region: inputs, then the features nexusd writes.
struct Layout {
  std::uint64_t images = 0, tokens = 0, mask = 0, features = 0, bytes = 0;
};

Layout layout_for(const nexus::BackboneInfo& bb, std::int64_t n) {
  auto align = [](std::uint64_t v) { return (v + 63) / 64 * 64; };
  Layout l;
  l.tokens = align(l.images + static_cast<std::uint64_t>(n * bb.image_size * bb.image_size * 3));
  l.mask = align(l.tokens + static_cast<std::uint64_t>(n * bb.max_tokens * 4));
  l.features = align(l.mask + static_cast<std::uint64_t>(n * bb.max_tokens));
  l.bytes = align(l.features + static_cast<std::uint64_t>(n * bb.feature_dim * 4));
  return l;
}

// Solves (A + lambda I) x = b for symmetric positive definite A (d x d, row-major) by Cholesky,
// for `cols` right-hand sides at once. By hand: the tenant links only libnexus, and d is small.
std::vector<double> ridge_solve(std::vector<double> a, std::vector<double> b, int d, int cols, double lambda) {
  for (int i = 0; i < d; ++i) a[i * d + i] += lambda;
  for (int j = 0; j < d; ++j) {  // a = L L^T, L in the lower triangle
    double s = a[j * d + j];
    for (int k = 0; k < j; ++k) s -= a[j * d + k] * a[j * d + k];
    a[j * d + j] = std::sqrt(s);
    for (int i = j + 1; i < d; ++i) {
      double t = a[i * d + j];
      for (int k = 0; k < j; ++k) t -= a[i * d + k] * a[j * d + k];
      a[i * d + j] = t / a[j * d + j];
    }
  }
  for (int c = 0; c < cols; ++c) {
    for (int i = 0; i < d; ++i) {  // L y = b
      double t = b[i * cols + c];
      for (int k = 0; k < i; ++k) t -= a[i * d + k] * b[k * cols + c];
      b[i * cols + c] = t / a[i * d + i];
    }
    for (int i = d - 1; i >= 0; --i) {  // L^T x = y
      double t = b[i * cols + c];
      for (int k = i + 1; k < d; ++k) t -= a[k * d + i] * b[k * cols + c];
      b[i * cols + c] = t / a[i * d + i];
    }
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"features_tenant: a head in the tenant's process, on nexusd's backbone features"};
  nexus::ClientOptions opt;
  int train = 512, heldout = 256, batch = 64;
  std::uint64_t seed = 1;
  double lambda = 1e-2;
  app.add_option("-s,--socket", opt.socket_path, "nexusd control socket");
  app.add_option("-t,--tenant", opt.tenant, "tenant name")->required();
  app.add_option("--train", train, "training scenes");
  app.add_option("--heldout", heldout, "held-out scenes");
  app.add_option("--batch", batch, "scenes per features request")->check(CLI::Range(1, 1024));
  app.add_option("--seed", seed, "scene seed");
  app.add_option("--lambda", lambda, "ridge penalty");
  CLI11_PARSE(app, argc, argv);
  opt.timeout = std::chrono::seconds(60);
  try {
    auto client = nexus::Client::attach(opt);
    const auto bb = client->backbone();
    const auto lay = layout_for(bb, batch);
    const auto region = client->register_host_region(lay.bytes);
    std::fprintf(stderr, "[%s] region %u: %llu bytes, batches of %d\n", opt.tenant.c_str(), region.id(),
                 static_cast<unsigned long long>(lay.bytes), batch);
    const std::int64_t n = batch, d = bb.feature_dim;
    auto images = region.tensor(nexus::DType::UInt8, {n, 1, bb.image_size, bb.image_size, 3}, lay.images);
    auto tokens = region.tensor(nexus::DType::Int32, {n, bb.max_tokens}, lay.tokens);
    auto mask = region.tensor(nexus::DType::UInt8, {n, bb.max_tokens}, lay.mask);
    auto features = region.tensor(nexus::DType::Float32, {n, d}, lay.features);

    // Features (and a bias) and targets of `count` scenes, `batch` per request.
    auto collect = [&](nexus::synth::SceneGenerator& scenes, int count, std::vector<double>& x, std::vector<double>& y) {
      const std::size_t image_bytes = images.bytes() / static_cast<std::size_t>(n);
      for (int done = 0; done < count; done += batch) {
        std::vector<float> targets;
        for (std::int64_t i = 0; i < n; ++i) {
          const auto s = scenes.next();
          std::memcpy(images.raw().data() + i * image_bytes, s.image.data(), image_bytes);
          nexus::tokenize(s.instruction, tokens, mask, i);
          const auto a = nexus::synth::reach_actions(s, 1);
          targets.insert(targets.end(), a.begin(), a.end());
        }
        const auto r = client->features({&images, &tokens, &mask, nullptr}, features);
        const auto f = features.as<float>();
        for (std::int64_t i = 0; i < n && done + i < count; ++i) {
          for (std::int64_t k = 0; k < d; ++k) x.push_back(f[static_cast<std::size_t>(i * d + k)]);
          x.push_back(1.0);
          for (int k = 0; k < kActionDim; ++k) y.push_back(targets[static_cast<std::size_t>(i * kActionDim + k)]);
        }
        if (r.samples != static_cast<std::uint32_t>(n) || r.dim != static_cast<std::uint32_t>(d))
          throw nexus::Error(nexus::ErrorCode::BadMessage, "features reply does not match the request");
      }
    };
    nexus::synth::SceneGenerator train_scenes(seed, {.image_size = bb.image_size});
    nexus::synth::SceneGenerator held_scenes(seed + 1'000'003, {.image_size = bb.image_size});
    std::vector<double> xt, yt, xh, yh;
    collect(train_scenes, train, xt, yt);
    collect(held_scenes, heldout, xh, yh);

    // The head: ridge regression, fitted here on nexusd's features.
    const int p = static_cast<int>(d) + 1;
    std::vector<double> xtx(static_cast<std::size_t>(p * p), 0.0), xty(static_cast<std::size_t>(p * kActionDim), 0.0);
    for (int s = 0; s < train; ++s)
      for (int i = 0; i < p; ++i) {
        const double xi = xt[static_cast<std::size_t>(s * p + i)];
        for (int j = 0; j < p; ++j) xtx[static_cast<std::size_t>(i * p + j)] += xi * xt[static_cast<std::size_t>(s * p + j)];
        for (int k = 0; k < kActionDim; ++k)
          xty[static_cast<std::size_t>(i * kActionDim + k)] += xi * yt[static_cast<std::size_t>(s * kActionDim + k)];
      }
    const auto w = ridge_solve(xtx, xty, p, kActionDim, lambda * train);
    double mean[kActionDim] = {0, 0};
    for (int s = 0; s < train; ++s)
      for (int k = 0; k < kActionDim; ++k) mean[k] += yt[static_cast<std::size_t>(s * kActionDim + k)] / train;
    double err = 0, base = 0;
    for (int s = 0; s < heldout; ++s)
      for (int k = 0; k < kActionDim; ++k) {
        double pred = 0;
        for (int i = 0; i < p; ++i) pred += xh[static_cast<std::size_t>(s * p + i)] * w[static_cast<std::size_t>(i * kActionDim + k)];
        const double y = yh[static_cast<std::size_t>(s * kActionDim + k)];
        err += (pred - y) * (pred - y), base += (mean[k] - y) * (mean[k] - y);
      }
    err /= heldout * kActionDim, base /= heldout * kActionDim;
    std::printf("{\"tenant\": \"%s\", \"region\": %u, \"region_bytes\": %llu, \"train\": %d, \"heldout\": %d, "
                "\"dim\": %lld, \"heldout_mse\": %.6g, \"baseline_mse\": %.6g}\n",
                opt.tenant.c_str(), region.id(), static_cast<unsigned long long>(lay.bytes), train, heldout,
                static_cast<long long>(d), err, base);
    return 0;
  } catch (const nexus::Error& e) {
    std::fprintf(stderr, "features_tenant: %s: %s\n", nexus::error_code_name(e.code()), e.what());
    return 1;
  }
}
