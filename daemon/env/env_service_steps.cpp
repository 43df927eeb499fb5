// The Environment Service's resets and steps: one call's sessions on the worker pool, sessions
// that share an external connection as one exchange, and engines' steps sent before any is
// collected (begin_steps), so other processes work at once.
#include <algorithm>
#include <map>

#include "daemon/env/env_service.hpp"
#include "daemon/env/env_service_session.hpp"

namespace nexus::env {

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

}  // namespace nexus::env
