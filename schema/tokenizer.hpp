// The embedded default tokenizer, part of the contract: one token per UTF-8 byte of the
// instruction, truncated to max_tokens, mask 1 where a token is real. Tenants (libnexus's
// nexus::tokenize) and the daemon (batches it samples from datasets) both write it.
#pragma once
#include <cstdint>
#include <string_view>

namespace nexus::schema {

inline void tokenize_bytes(std::string_view text, std::int32_t* tokens, std::uint8_t* mask, std::int64_t max_tokens) {
  for (std::int64_t i = 0; i < max_tokens; ++i) {
    const bool real = i < static_cast<std::int64_t>(text.size());
    tokens[i] = real ? static_cast<unsigned char>(text[static_cast<std::size_t>(i)]) : 0;
    mask[i] = real ? 1 : 0;
  }
}

}  // namespace nexus::schema
