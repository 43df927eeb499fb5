#include "daemon/env/env_service.hpp"

#include <algorithm>
#include <cmath>
#include <map>

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

// One reset or step call: what every session's work reads, and where it writes.
struct EnvService::Call {
  std::span<const std::uint64_t> ids, seeds;
  std::span<const float> actions;
  const std::vector<std::shared_ptr<Session>>& sessions;
  SessionSpec spec;
  std::uint8_t* images;
  float* state;
  std::vector<SessionResult>& results;

  bool resetting() const { return !seeds.empty(); }
  std::size_t image_bytes() const { return static_cast<std::size_t>(spec.image_size) * spec.image_size * 3; }
  std::span<const float> action(std::size_t i) const {
    const auto adim = static_cast<std::size_t>(spec.action_dim);
    return actions.subspan(i * adim, adim);
  }
  // Whether session i may run (not failed before; reset before a step); if not, says why.
  bool may_run(std::size_t i) const {
    Session& s = *sessions[i];
    if (!s.failure.empty()) {
      results[i].error = "session " + std::to_string(ids[i]) + " failed earlier (" + s.failure +
                         "): close it and open a new one";
      results[i].failed = true;
      return false;
    }
    if (!resetting() && !s.started) {
      results[i].error = "reset the session before stepping it";
      return false;
    }
    return true;
  }
  void fail(std::size_t i, const std::string& why) const {
    Session& s = *sessions[i];
    s.failure = why;
    results[i].error = "session " + std::to_string(ids[i]) + " (" + s.task + ") failed: " + why;
    results[i].failed = true;
  }
  void observe(std::size_t i) const {
    Session& s = *sessions[i];
    s.env->observe(images + i * image_bytes(), state + i * static_cast<std::size_t>(spec.state_dim));
    results[i].instruction = s.env->instruction();
    results[i].engine = s.env->placement();
    results[i].interrupted = s.env->take_interruption();
  }
};

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
  std::vector<SessionResult> results(sessions.size());
  const Call call{ids, seeds, actions, sessions, spec, images, state, results};
  // Work items: a session on its own, or all of this call's sessions that share a batch (an
  // external connection), which go to the simulator as one exchange.
  std::vector<std::vector<std::size_t>> items;
  std::map<SessionBatch*, std::size_t> item_of_batch;
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    SessionBatch* b = sessions[i]->env->batch();
    if (!b) {
      items.push_back({i});
      continue;
    }
    auto [it, fresh] = item_of_batch.try_emplace(b, items.size());
    if (fresh) items.emplace_back();
    items[it->second].push_back(i);
  }
  // A step holds every one of its single sessions from the start (begin_steps); the steps of
  // sessions in other processes (rollout engines) are all sent first, so those processes work at
  // once, and collected after the pool ran the rest.
  std::vector<char> done(sessions.size(), 0);
  std::vector<std::unique_lock<std::mutex>> held;
  const auto begun = resetting ? std::vector<std::size_t>{} : begin_steps(call, items, done, held);
  pool_.parallel_for(items.size(), [&](std::size_t k) {
    if (sessions[items[k].front()]->env->batch()) return run_batch(call, items[k]);
    const std::size_t i = items[k].front();
    if (done[i]) return;
    Session& s = *sessions[i];
    std::unique_lock lk(s.mu, std::defer_lock);
    if (resetting) lk.lock();  // a step's are held already
    if (!call.may_run(i)) return;
    try {
      if (resetting) {
        s.env->reset(seeds[i]);
        s.started = true;
      } else {
        results[i].outcome = s.env->step(call.action(i));
      }
      call.observe(i);
    } catch (const BadInput& e) {
      results[i].error = e.what();
    } catch (const std::exception& e) {
      call.fail(i, e.what());
    }
  });
  for (auto i : begun) {
    try {
      results[i].outcome = sessions[i]->env->collect_step();
      call.observe(i);
    } catch (const BadInput& e) {
      results[i].error = e.what();
    } catch (const std::exception& e) {
      call.fail(i, e.what());
    }
  }
  return results;
}

std::vector<std::size_t> EnvService::begin_steps(const Call& call, const std::vector<std::vector<std::size_t>>& items,
                                                std::vector<char>& done,
                                                std::vector<std::unique_lock<std::mutex>>& held) const {
  // All of the call's single sessions, locked in address order before anything runs (as
  // run_batch locks a batch's): two calls take what they share in one order, so neither waits
  // on the other while holding what the other waits for.
  std::vector<std::size_t> order;
  for (const auto& item : items)
    if (!call.sessions[item.front()]->env->batch()) order.push_back(item.front());
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return call.sessions[a].get() < call.sessions[b].get(); });
  for (auto i : order) held.emplace_back(call.sessions[i]->mu);
  std::vector<std::size_t> begun;
  for (auto i : order) {
    Session& s = *call.sessions[i];
    try {
      if (!call.may_run(i)) {
        done[i] = 1;
      } else if (s.env->begin_step(call.action(i))) {
        done[i] = 1;
        begun.push_back(i);
      }
    } catch (const BadInput& e) {
      call.results[i].error = e.what();
      done[i] = 1;
    } catch (const std::exception& e) {
      call.fail(i, e.what());
      done[i] = 1;
    }
  }
  return begun;
}

void EnvService::run_batch(const Call& call, const std::vector<std::size_t>& at) const {
  // Another call may hold other sessions of the same batch: every call locks in one order
  // (the sessions' addresses), so two never wait on each other.
  std::vector<std::size_t> order = at;
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return call.sessions[a].get() < call.sessions[b].get(); });
  std::vector<std::unique_lock<std::mutex>> locks;
  for (auto i : order) locks.emplace_back(call.sessions[i]->mu);
  std::vector<std::size_t> live;
  std::vector<int> indices;
  std::vector<std::uint64_t> seeds;
  std::vector<float> actions;
  for (auto i : at) {
    if (!call.may_run(i)) continue;
    live.push_back(i);
    indices.push_back(call.sessions[i]->env->batch_index());
    if (call.resetting()) seeds.push_back(call.seeds[i]);
    else actions.insert(actions.end(), call.action(i).begin(), call.action(i).end());
  }
  if (live.empty()) return;
  std::vector<SessionBatch::Member> out;
  try {
    out = call.sessions[live.front()]->env->batch()->run(indices, seeds, actions);
    if (out.size() != live.size()) throw std::logic_error("the batch answered for the wrong number of sessions");
  } catch (const std::exception& e) {
    for (auto i : live) call.fail(i, e.what());
    return;
  }
  for (std::size_t j = 0; j < live.size(); ++j) {
    const auto i = live[j];
    if (!out[j].broke.empty()) {
      call.fail(i, out[j].broke);
    } else if (!out[j].refused.empty()) {
      call.results[i].error = out[j].refused;
    } else {
      call.results[i].outcome = out[j].outcome;
      if (call.resetting()) call.sessions[i]->started = true;
      call.observe(i);
    }
  }
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
