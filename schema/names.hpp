// Names that become parts of file names: tenants, checkpoint tags, dataset names, job labels.
//
// One rule, checked here and nowhere else, by every path that turns a name into a file name
// (the tenant registry, the request decoder, the slot registry's directories): 1 to 64 characters
// of [A-Za-z0-9._-], the first not a '.'. So a name is one ordinary path component: never "." or
// "..", never hidden, never a separator, and safe in logs and Prometheus labels.
//
// Header-only and dependency-free: the client checks names before sending them too.
#pragma once
#include <string_view>

namespace nexus::schema {

inline constexpr std::size_t kMaxNameLength = 64;
inline constexpr const char* kNameRule = "1-64 characters of [A-Za-z0-9._-], not starting with '.'";

constexpr bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength || name.front() == '.') return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

static_assert(!valid_name(".") && !valid_name("..") && !valid_name(".x") && !valid_name("a/b") && valid_name("a.b"),
              "the rule keeps names to one ordinary path component");

}  // namespace nexus::schema
