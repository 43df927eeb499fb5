// Features mode through a real nexusd: the features it writes into a tenant's region (inputs in
// the region too) are the backbone's own, computed here in-process on the same bytes; and the
// same request with everything in the arena gives the same numbers.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "daemon/model/backbone.hpp"
#include "nexus/client.hpp"
#include "processes.hpp"

using namespace nexus;

TEST_CASE("features written into a region equal the backbone's own, in-process, on the same bytes",
          "[model][regions]") {
  test::TempDir dir;
  test::Daemon daemon({"--weights", test::tiny_weights_path(), "--allow-device-regions", "--log-level", "warn",
                       "--state-dir", dir.path + "/state"});
  auto client = Client::attach({.socket_path = daemon.socket(), .tenant = "features",
                                .timeout = std::chrono::seconds(60)});
  const auto bb = client->backbone();
  const std::int64_t n = 6, t = bb.max_tokens, d = bb.feature_dim, s = bb.image_size;
  const std::uint64_t image_bytes = static_cast<std::uint64_t>(n * s * s * 3);
  const std::uint64_t tokens_at = (image_bytes + 63) / 64 * 64, mask_at = tokens_at + n * t * 4,
                      out_at = (mask_at + n * t + 63) / 64 * 64;
  const auto region = client->register_host_region(out_at + n * d * 4);
  CHECK(region.id() != 0);
  auto images = region.tensor(DType::UInt8, {n, 1, s, s, 3}, 0);
  auto tokens = region.tensor(DType::Int32, {n, t}, tokens_at);
  auto mask = region.tensor(DType::UInt8, {n, t}, mask_at);
  auto out = region.tensor(DType::Float32, {n, d}, out_at);
  for (std::size_t i = 0; i < images.bytes(); ++i) images.raw()[i] = static_cast<std::uint8_t>((i * 131 + i / 7) % 251);
  const char* words[] = {"pick up the red cube", "push the blue ball left", "reach the green block"};
  for (std::int64_t i = 0; i < n; ++i) tokenize(words[i % 3], tokens, mask, i);

  const auto r = client->features({&images, &tokens, &mask, nullptr}, out);
  CHECK(r.samples == n);
  CHECK(r.dim == d);

  // The same bytes through the same weights here.
  model::VLABackbone backbone(*model::named_backbone("tiny"));
  model::load_weights(*backbone, test::tiny_weights_path());
  backbone->freeze();
  torch::NoGradGuard no_grad;
  auto img = torch::from_blob(images.raw().data(), {n, 1, s, s, 3}, torch::kUInt8).clone();
  auto tok = torch::from_blob(tokens.raw().data(), {n, t}, torch::kInt32).clone();
  auto msk = torch::from_blob(mask.raw().data(), {n, t}, torch::kUInt8).to(torch::kBool);
  const auto want = backbone->forward(img, tok, msk).pooled;
  const auto got = torch::from_blob(out.raw().data(), {n, d}, torch::kFloat32).clone();
  INFO("max |difference| " << (got - want).abs().max().item<float>());
  CHECK(torch::allclose(got, want, 1e-5, 1e-5));
  CHECK(want.abs().sum().item<float>() > 0);  // not a zero region that would match anything zero

  // Everything in the arena instead: the same numbers.
  auto a_images = client->alloc(DType::UInt8, {n, 1, s, s, 3});
  auto a_tokens = client->alloc(DType::Int32, {n, t});
  auto a_mask = client->alloc(DType::UInt8, {n, t});
  auto a_out = client->alloc(DType::Float32, {n, d});
  std::memcpy(a_images.raw().data(), images.raw().data(), images.bytes());
  std::memcpy(a_tokens.raw().data(), tokens.raw().data(), tokens.bytes());
  std::memcpy(a_mask.raw().data(), mask.raw().data(), mask.bytes());
  client->features({&a_images, &a_tokens, &a_mask, nullptr}, a_out);
  CHECK(std::memcmp(a_out.raw().data(), out.raw().data(), out.bytes()) == 0);
}
