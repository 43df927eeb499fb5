#include "daemon/master/tenant_registry.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "daemon/state/private_files.hpp"

namespace nexus::daemon {

TenantRegistry::TenantRegistry(std::filesystem::path bindings_file) : file_(std::move(bindings_file)) {
  if (file_.empty() || !std::filesystem::exists(file_)) return;
  std::ifstream in(file_);
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.contains("bindings") || !j["bindings"].is_object())
    throw std::runtime_error(file_.string() + ": not a tenant bindings file (fix or remove it; it says who owns which name)");
  for (const auto& [name, uid] : j["bindings"].items()) {
    if (!valid_tenant_name(name) || !uid.is_number_unsigned())
      throw std::runtime_error(file_.string() + ": bad binding '" + name + "'");
    names_[name] = Entry{uid.get<uid_t>(), false};
  }
}

void TenantRegistry::save() const {
  if (file_.empty()) return;
  nlohmann::json j = {{"format", "nexus-tenant-bindings-v1"}, {"bindings", nlohmann::json::object()}};
  for (const auto& [name, e] : names_) j["bindings"][name] = e.owner;
  write_private_file(file_, j.dump(1) + "\n");
}

std::optional<uid_t> TenantRegistry::owner(const std::string& name) const {
  auto it = names_.find(name);
  if (it == names_.end()) return std::nullopt;
  return it->second.owner;
}

TenantRegistry::Claim TenantRegistry::unbind(const std::string& name, uid_t requester) {
  Claim c;
  auto it = names_.find(name);
  if (it == names_.end() || (requester != 0 && requester != it->second.owner)) {
    c.code = wire::ErrorCode::PermissionDenied;  // another user's name reads like no name
    c.reason = "no tenant '" + name + "' of yours to release";
    return c;
  }
  if (it->second.attached) {
    c.code = wire::ErrorCode::AlreadyAttached;
    c.reason = "tenant '" + name + "' is attached: detach it first";
    return c;
  }
  names_.erase(it);
  save();
  return c;
}

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
  if (inserted) {
    try {
      save();  // durable before the tenant can make anything under its name
    } catch (const std::exception& e) {
      names_.erase(it);
      c.code = wire::ErrorCode::Internal;
      c.reason = std::string("cannot record the tenant's owner: ") + e.what();
      return c;
    }
  }
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
