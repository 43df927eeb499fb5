#include "daemon/state/content_digest.hpp"

#include <openssl/evp.h>

#include <stdexcept>

namespace nexus::daemon {

struct ContentHasher::State {
  EVP_MD_CTX* ctx = nullptr;
  bool finished = false;
};

ContentHasher::ContentHasher() : state_(std::make_unique<State>()) {
  state_->ctx = EVP_MD_CTX_new();
  if (!state_->ctx || EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("OpenSSL: SHA-256 is not available");
}

ContentHasher::~ContentHasher() { EVP_MD_CTX_free(state_->ctx); }

ContentHasher& ContentHasher::bytes(const void* data, std::size_t size) {
  if (state_->finished) throw std::logic_error("ContentHasher: bytes after finish");
  if (size > 0 && EVP_DigestUpdate(state_->ctx, data, size) != 1) throw std::runtime_error("OpenSSL: SHA-256 update");
  return *this;
}

ContentHasher& ContentHasher::text(std::string_view s) {
  number(s.size());
  return bytes(s.data(), s.size());
}

ContentHasher& ContentHasher::number(std::uint64_t v) {
  std::uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<std::uint8_t>(v >> (8 * i));
  return bytes(le, sizeof le);
}

ContentDigest ContentHasher::finish() {
  if (state_->finished) throw std::logic_error("ContentHasher: finished twice");
  state_->finished = true;
  ContentDigest d{};
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(state_->ctx, d.data(), &n) != 1 || n != d.size())
    throw std::runtime_error("OpenSSL: SHA-256 final");
  return d;
}

std::string to_hex(const ContentDigest& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(d.size() * 2);
  for (auto b : d) s += kHex[b >> 4], s += kHex[b & 15];
  return s;
}

}  // namespace nexus::daemon
