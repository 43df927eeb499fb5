// Named sizes of the built-in VLA backbone. Torch-free so that tools and configs can name them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nexus::model {

struct BackboneConfig {
  std::string name;
  std::int64_t image_size = 64;  // square RGB views, uint8 [H, W, 3]
  std::int64_t patch = 8;
  std::int64_t max_views = 2;
  std::int64_t dim = 128;
  std::int64_t layers = 2;
  std::int64_t heads = 4;
  std::int64_t mlp_ratio = 4;
  std::int64_t max_tokens = 32;  // instruction bytes
  std::uint64_t init_seed = 0;   // deterministic initialisation when no weights are loaded

  std::int64_t patches_per_view() const { return (image_size / patch) * (image_size / patch); }
  // CLS + patches of `views` views + max_tokens instruction tokens.
  std::int64_t sequence_length(std::int64_t views) const { return 1 + views * patches_per_view() + max_tokens; }
};

// "tiny" (tests, ~0.5M parameters) and "small" (demo and benchmarks, ~11M).
std::optional<BackboneConfig> named_backbone(std::string_view name);

}  // namespace nexus::model
