#include "daemon/master/tenant_registry.hpp"

namespace nexus::daemon {

bool valid_tenant_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

TenantRegistry::Claim TenantRegistry::claim(const std::string& name, uid_t uid) {
  Claim c;
  if (!valid_tenant_name(name)) {
    c.code = wire::ErrorCode::BadMessage;
    c.reason = "tenant name must be 1-64 characters of [A-Za-z0-9._-]";
    return c;
  }
  auto [it, inserted] = names_.try_emplace(name, Entry{uid, false});
  if (it->second.owner != uid) {
    c.code = wire::ErrorCode::PermissionDenied;
    c.reason = "tenant '" + name + "' belongs to uid " + std::to_string(it->second.owner);
    return c;
  }
  if (it->second.attached) {
    c.code = wire::ErrorCode::AlreadyAttached;
    c.reason = "tenant '" + name + "' is attached through another connection";
    return c;
  }
  it->second.attached = true;
  ++attached_count_;
  c.session_id = next_session_++;
  return c;
}

void TenantRegistry::release(const std::string& name) {
  auto it = names_.find(name);
  if (it != names_.end() && it->second.attached) {
    it->second.attached = false;
    --attached_count_;
  }
}

}  // namespace nexus::daemon
