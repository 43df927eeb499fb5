#include "daemon/env/env_service.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "daemon/env/builtin_session.hpp"
#include "daemon/env/env_service_session.hpp"

namespace nexus::env {

EnvService::EnvService(EnvLimits limits, SessionFactory factory, metrics::Accounting* accounting,
                       daemon::HealthManager* health)
    : limits_(limits),
      factory_(factory ? std::move(factory)
                       : SessionFactory([](const std::string& task, int image_size, int max_steps, int count,
                                           std::optional<uid_t>) {
                           return make_builtin_sessions(task, image_size, max_steps, count);
                         })),
      accounting_(accounting),
      pool_(std::max(0, limits.workers), health) {}

EnvService::~EnvService() = default;

EnvService::Opened EnvService::open(const std::string& tenant, const std::string& task, int count, int image_size,
                                    int max_steps) {
  if (count < 1 || count > limits_.max_sessions_per_tenant)
    throw EnvError(EnvError::Kind::BadRequest,
                   "count must be 1.." + std::to_string(limits_.max_sessions_per_tenant));
  if (max_steps < 0 || max_steps > limits_.max_steps)
    throw EnvError(EnvError::Kind::BadRequest, "max_steps must be 0 (the task's own) .." + std::to_string(limits_.max_steps));
  std::optional<uid_t> owner;
  {
    std::lock_guard lk(mu_);
    if (auto it = owners_.find(tenant); it != owners_.end()) owner = it->second;
    const auto owned = std::count_if(sessions_.begin(), sessions_.end(), [&](auto& kv) { return kv.second->tenant == tenant; });
    if (owned + count > limits_.max_sessions_per_tenant)
      throw EnvError(EnvError::Kind::TooManySessions,
                     "a tenant may hold " + std::to_string(limits_.max_sessions_per_tenant) + " sessions; close some");
    if (sessions_.size() + static_cast<std::size_t>(count) > static_cast<std::size_t>(limits_.max_sessions))
      throw EnvError(EnvError::Kind::TooManySessions,
                     "nexusd holds " + std::to_string(sessions_.size()) + " of its " + std::to_string(limits_.max_sessions) +
                         " sessions; try fewer, or later");
  }
  // Built outside the lock: loading a model and its renderer, or a simulator's connection, takes
  // milliseconds.
  std::vector<std::unique_ptr<EnvSession>> envs;
  try {
    envs = factory_(task, image_size, max_steps, count, owner);
  } catch (const std::exception& e) {
    throw EnvError(EnvError::Kind::BadRequest, "cannot open '" + task + "': " + e.what());
  }
  if (envs.size() != static_cast<std::size_t>(count) || std::find(envs.begin(), envs.end(), nullptr) != envs.end())
    throw EnvError(EnvError::Kind::BadRequest, "cannot open '" + task + "': the factory made the wrong sessions");
  std::vector<std::shared_ptr<Session>> made;
  for (auto& env : envs) {
    auto s = std::make_shared<Session>();
    s->tenant = tenant;
    s->task = task;
    s->env = std::move(env);
    made.push_back(std::move(s));
  }
  Opened out;
  out.spec = made.front()->env->spec();
  std::lock_guard lk(mu_);
  for (auto& s : made) {
    out.ids.push_back(next_id_);
    sessions_[next_id_++] = std::move(s);
  }
  return out;
}

std::vector<std::shared_ptr<EnvService::Session>> EnvService::lookup(const std::string& tenant,
                                                                      std::span<const std::uint64_t> ids,
                                                                      SessionSpec* spec) const {
  if (ids.empty()) throw EnvError(EnvError::Kind::BadRequest, "no sessions named");
  std::vector<std::shared_ptr<Session>> out;
  std::lock_guard lk(mu_);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto it = sessions_.find(ids[i]);
    // Another tenant's session reads exactly like one that never existed.
    if (it == sessions_.end() || it->second->tenant != tenant)
      throw EnvError(EnvError::Kind::UnknownSession, "no session " + std::to_string(ids[i]) + " of this tenant");
    if (std::find(ids.begin(), ids.begin() + static_cast<long>(i), ids[i]) != ids.begin() + static_cast<long>(i))
      throw EnvError(EnvError::Kind::BadRequest, "session " + std::to_string(ids[i]) + " named twice");
    out.push_back(it->second);
  }
  // Specs are fixed at open: reading them needs no session lock.
  const auto& first = out.front()->env->spec();
  for (const auto& s : out) {
    const auto& sp = s->env->spec();
    if (sp.image_size != first.image_size || sp.state_dim != first.state_dim || sp.action_dim != first.action_dim)
      throw EnvError(EnvError::Kind::BadRequest, "sessions stepped together must share image size, state and action dims");
  }
  if (spec) *spec = first;
  return out;
}

SessionSpec EnvService::spec_of(const std::string& tenant, std::span<const std::uint64_t> ids) const {
  SessionSpec spec;
  lookup(tenant, ids, &spec);
  return spec;
}

std::vector<SessionResult> EnvService::reset(const std::string& tenant, std::span<const std::uint64_t> ids,
                                             std::span<const std::uint64_t> seeds, std::uint8_t* images, float* state) {
  if (seeds.size() != ids.size())
    throw EnvError(EnvError::Kind::BadRequest, "reset needs one seed per session");
  return run(tenant, ids, seeds, {}, images, state);
}

std::vector<SessionResult> EnvService::step(const std::string& tenant, std::span<const std::uint64_t> ids,
                                            std::span<const float> actions, std::uint8_t* images, float* state) {
  return run(tenant, ids, {}, actions, images, state);
}


std::size_t EnvService::close(const std::string& tenant, std::span<const std::uint64_t> ids) {
  std::vector<std::shared_ptr<Session>> closing;  // destroyed outside the lock
  std::lock_guard lk(mu_);
  for (auto id : ids) {
    auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second->tenant != tenant) continue;
    closing.push_back(std::move(it->second));
    sessions_.erase(it);
  }
  return closing.size();
}

void EnvService::tenant_attached(const std::string& tenant, uid_t uid) {
  std::lock_guard lk(mu_);
  owners_[tenant] = uid;
}

void EnvService::tenant_detached(const std::string& tenant) {
  std::vector<std::shared_ptr<Session>> closing;
  std::lock_guard lk(mu_);
  owners_.erase(tenant);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second->tenant == tenant) {
      closing.push_back(std::move(it->second));
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
}

std::size_t EnvService::sessions() const {
  std::lock_guard lk(mu_);
  return sessions_.size();
}

}  // namespace nexus::env
