// Content digests (SHA-256) for keys that must not collide even when a tenant picks the bytes:
// the frozen-feature cache's keys (docs/design/cache.md) are made of them, and a tenant that could
// make two different samples share a key could read or poison another's cached features.
// OpenSSL's EVP SHA-256 (libssl-dev): a well-kept implementation, with the CPU's SHA extensions
// where it has them; FNV-1a (the transport's digest of a tensor) is not collision-resistant.
//
// Thread safety: a ContentHasher is one thread's; the free functions are safe anywhere.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace nexus::daemon {

using ContentDigest = std::array<std::uint8_t, 32>;

class ContentHasher {
 public:
  ContentHasher();
  ~ContentHasher();
  ContentHasher(const ContentHasher&) = delete;
  ContentHasher& operator=(const ContentHasher&) = delete;

  ContentHasher& bytes(const void* data, std::size_t size);
  // Lengths go in first, so that ("ab", "c") and ("a", "bc") differ.
  ContentHasher& text(std::string_view s);
  ContentHasher& number(std::uint64_t v);  // 8 bytes, little-endian
  ContentHasher& digest(const ContentDigest& d) { return bytes(d.data(), d.size()); }
  ContentDigest finish();  // once

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string to_hex(const ContentDigest& d);

}  // namespace nexus::daemon
