#include "daemon/ipc/tenant_registry.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "daemon/log/log_text.hpp"
#include "schema/names.hpp"

namespace nexus::daemon {

TenantRegistry::TenantRegistry(std::filesystem::path bindings_file, RegistryLimits limits) : limits_(limits) {
  if (bindings_file.empty()) return;
  if (std::filesystem::exists(bindings_file)) {
    std::ifstream in(bindings_file);
    std::stringstream text;
    text << in.rdbuf();
    const auto j = nlohmann::json::parse(text.str(), nullptr, false);
    if (j.is_discarded() || !j.contains("bindings") || !j["bindings"].is_object())
      throw std::runtime_error(bindings_file.string() +
                               ": not a tenant bindings file (fix or remove it; it says who owns which name)");
    for (const auto& [name, uid] : j["bindings"].items()) {
      if (!uid.is_number_unsigned()) throw std::runtime_error(bindings_file.string() + ": bad binding '" + name + "'");
      if (!schema::valid_name(name)) {  // admitted by an older rule ('.', '..'): nobody may attach as it now
        log_text(LogLevel::Warn, "binding_dropped", "name=\"" + name + "\" reason=\"names are " + schema::kNameRule + "\"");
        continue;
      }
      names_[name] = Entry{uid.get<uid_t>(), false};
      mirror_[name] = uid.get<uid_t>();
      ++per_uid_[uid.get<uid_t>()];
    }
  }
  writer_ = std::make_unique<BatchedWriter>(std::move(bindings_file), [this] { return render(); });
}

void TenantRegistry::persist(const std::string& name, std::optional<uid_t> owner) {
  if (!writer_) return;
  {
    MutexLock lk(mirror_mu_);
    if (owner)
      mirror_[name] = *owner;
    else
      mirror_.erase(name);
  }
  writer_->changed();
}

std::string TenantRegistry::render() const {
  nlohmann::json j = {{"format", "nexus-tenant-bindings-v1"}, {"bindings", nlohmann::json::object()}};
  MutexLock lk(mirror_mu_);
  for (const auto& [name, owner] : mirror_) j["bindings"][name] = owner;
  return j.dump(1) + "\n";
}

bool TenantRegistry::flush() { return writer_ ? writer_->flush() : true; }

std::optional<uid_t> TenantRegistry::owner(const std::string& name) const {
  auto it = names_.find(name);
  if (it == names_.end()) return std::nullopt;
  return it->second.owner;
}

std::size_t TenantRegistry::names_of(uid_t uid) const {
  auto it = per_uid_.find(uid);
  return it == per_uid_.end() ? 0 : it->second;
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
  if (--per_uid_[it->second.owner] == 0) per_uid_.erase(it->second.owner);
  names_.erase(it);
  persist(name, std::nullopt);
  return c;
}

TenantRegistry::Claim TenantRegistry::claim(const std::string& name, uid_t uid) {
  Claim c;
  if (!schema::valid_name(name)) {
    c.code = wire::ErrorCode::BadMessage;
    c.reason = std::string("tenant names are ") + schema::kNameRule;
    return c;
  }
  auto it = names_.find(name);
  if (it == names_.end()) {
    if (names_of(uid) >= limits_.names_per_uid) {
      c.code = wire::ErrorCode::QuotaExceeded;
      c.reason = "Unix user " + std::to_string(uid) + " holds " + std::to_string(names_of(uid)) +
                 " tenant names, the most one user may ([daemon] max_names_per_uid); release one with "
                 "`nexusctl tenant release NAME`";
      return c;
    }
    if (names_.size() >= limits_.names_total) {
      c.code = wire::ErrorCode::QuotaExceeded;
      c.reason = "nexusd holds " + std::to_string(names_.size()) + " tenant names, its bound ([daemon] max_names)";
      return c;
    }
    it = names_.emplace(name, Entry{uid, false}).first;
    ++per_uid_[uid];
    persist(name, uid);
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
