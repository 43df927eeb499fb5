// Builds reply messages for the response ring. One per reactor thread; reuses its buffer.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

#include <flatbuffers/flatbuffers.h>

#include "nexus/wire/nexus_generated.h"

namespace nexus::daemon {

class ReplyBuilder {
 public:
  std::span<const std::uint8_t> error(std::uint64_t request_id, wire::ErrorCode code,
                                      std::string_view reason);
  std::span<const std::uint8_t> ping(std::uint64_t request_id,
                                     std::span<const std::uint8_t> payload);
  std::span<const std::uint8_t> digest(std::uint64_t request_id, std::uint64_t fnv1a,
                                       std::uint64_t bytes);
  std::span<const std::uint8_t> registered(std::uint64_t request_id, std::string_view backbone,
                                           std::int32_t image_size, std::int32_t max_views,
                                           std::int32_t max_tokens, std::int32_t feature_dim);
  std::span<const std::uint8_t> sft_step(std::uint64_t request_id, double loss, double grad_norm,
                                         std::uint64_t step);
  std::span<const std::uint8_t> predict(std::uint64_t request_id, std::span<const float> actions,
                                        std::span<const std::int64_t> shape);
  std::span<const std::uint8_t> published(std::uint64_t request_id, std::uint64_t version);
  std::span<const std::uint8_t> slot_digest(std::uint64_t request_id, std::uint64_t parameters, std::uint64_t optimizer,
                                            std::uint64_t step, std::uint64_t latest_version);
  std::span<const std::uint8_t> saved(std::uint64_t request_id, std::uint64_t step);
  std::span<const std::uint8_t> loaded(std::uint64_t request_id, std::uint64_t step);
  std::span<const std::uint8_t> region_registered(std::uint64_t request_id, std::uint32_t region, std::uint64_t bytes);
  std::span<const std::uint8_t> region_unregistered(std::uint64_t request_id, std::uint32_t region);
  std::span<const std::uint8_t> features(std::uint64_t request_id, std::uint32_t samples, std::uint32_t dim);

 private:
  std::span<const std::uint8_t> finish(std::uint64_t request_id, wire::Body type,
                                       flatbuffers::Offset<void> body);
  flatbuffers::FlatBufferBuilder fbb_{1024};
};

}  // namespace nexus::daemon
