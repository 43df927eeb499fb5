#include "daemon/env/env_service.hpp"

#include <algorithm>
#include <cmath>

#include "daemon/env/builtin_session.hpp"

namespace nexus::env {

struct EnvService::Session {
  std::string tenant;
  std::string task;
  std::mutex mu;  // one thread at a time in the simulator
  std::unique_ptr<EnvSession> env;
  bool started = false;     // GUARDED_BY(mu): reset at least once
  std::string failure;      // GUARDED_BY(mu): non-empty once the session failed
};

EnvService::EnvService(EnvLimits limits, SessionFactory factory, metrics::Accounting* accounting,
                       daemon::HealthManager* health, bool inject_worker_throw)
    : limits_(limits),
      factory_(factory ? std::move(factory) : SessionFactory(make_builtin_session)),
      accounting_(accounting),
      pool_(std::max(0, limits.workers), health, inject_worker_throw) {}

EnvService::~EnvService() = default;

EnvService::Opened EnvService::open(const std::string& tenant, const std::string& task, int count, int image_size,
                                    int max_steps) {
  if (count < 1 || count > limits_.max_sessions_per_tenant)
    throw EnvError(EnvError::Kind::BadRequest,
                   "count must be 1.." + std::to_string(limits_.max_sessions_per_tenant));
  if (max_steps < 0 || max_steps > limits_.max_steps)
    throw EnvError(EnvError::Kind::BadRequest, "max_steps must be 0 (the task's own) .." + std::to_string(limits_.max_steps));
  {
    std::lock_guard lk(mu_);
    const auto owned = std::count_if(sessions_.begin(), sessions_.end(), [&](auto& kv) { return kv.second->tenant == tenant; });
    if (owned + count > limits_.max_sessions_per_tenant)
      throw EnvError(EnvError::Kind::TooManySessions,
                     "a tenant may hold " + std::to_string(limits_.max_sessions_per_tenant) + " sessions; close some");
    if (sessions_.size() + static_cast<std::size_t>(count) > static_cast<std::size_t>(limits_.max_sessions))
      throw EnvError(EnvError::Kind::TooManySessions,
                     "nexusd holds " + std::to_string(sessions_.size()) + " of its " + std::to_string(limits_.max_sessions) +
                         " sessions; try fewer, or later");
  }
  // Built outside the lock: loading a model and its renderer takes milliseconds.
  std::vector<std::shared_ptr<Session>> made(static_cast<std::size_t>(count));
  std::vector<std::string> errors(made.size());
  pool_.parallel_for(made.size(), [&](std::size_t i) {
    try {
      auto s = std::make_shared<Session>();
      s->tenant = tenant;
      s->task = task;
      s->env = factory_(task, image_size, max_steps);
      made[i] = std::move(s);
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
  });
  for (const auto& e : errors)
    if (!e.empty()) throw EnvError(EnvError::Kind::BadRequest, "cannot open '" + task + "': " + e);
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

std::vector<SessionResult> EnvService::run(const std::string& tenant, std::span<const std::uint64_t> ids,
                                           std::span<const std::uint64_t> seeds, std::span<const float> actions,
                                           std::uint8_t* images, float* state) {
  SessionSpec spec;
  auto sessions = lookup(tenant, ids, &spec);
  const bool resetting = !seeds.empty();
  metrics::BusyScope busy(accounting_, metrics::Service::Environment, tenant);
  if (accounting_ && !resetting) accounting_->env_steps(tenant, ids.size());
  const auto adim = static_cast<std::size_t>(spec.action_dim);
  if (!resetting && actions.size() != ids.size() * adim)
    throw EnvError(EnvError::Kind::BadRequest, "actions must be [" + std::to_string(ids.size()) + ", " +
                                                   std::to_string(adim) + "], got " + std::to_string(actions.size()) +
                                                   " values");
  const std::size_t image_bytes = static_cast<std::size_t>(spec.image_size) * spec.image_size * 3;
  std::vector<SessionResult> results(sessions.size());
  pool_.parallel_for(sessions.size(), [&](std::size_t i) {
    Session& s = *sessions[i];
    SessionResult& r = results[i];
    std::lock_guard lk(s.mu);
    if (!s.failure.empty()) {
      r.error = "session " + std::to_string(ids[i]) + " failed earlier (" + s.failure + "): close it and open a new one";
      r.failed = true;
      return;
    }
    try {
      if (resetting) {
        s.env->reset(seeds[i]);
        s.started = true;
      } else {
        if (!s.started) throw BadInput("reset the session before stepping it");
        r.outcome = s.env->step(actions.subspan(i * adim, adim));
      }
      s.env->observe(images + i * image_bytes, state + i * static_cast<std::size_t>(spec.state_dim));
      r.instruction = s.env->instruction();
    } catch (const BadInput& e) {
      r.error = e.what();
    } catch (const std::exception& e) {
      s.failure = e.what();
      r.error = "session " + std::to_string(ids[i]) + " (" + s.task + ") failed: " + s.failure;
      r.failed = true;
    }
  });
  return results;
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

void EnvService::tenant_detached(const std::string& tenant) {
  std::vector<std::shared_ptr<Session>> closing;
  std::lock_guard lk(mu_);
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
