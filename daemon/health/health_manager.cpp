#include "daemon/health/health_manager.hpp"

#include <algorithm>

#include "daemon/log/log_text.hpp"

namespace nexus::daemon {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void Role::beat() { last_beat_ns_.store(now_ns(), std::memory_order_relaxed); }

void Role::failed(const std::string& reason, std::uint64_t generation) {
  {
    std::lock_guard lk(manager_.mu_);
    // A superseded holder (it woke after a restart handed its role on) reports nothing.
    if (generation != 0 && generation != generation_.load()) return;
    reason_ = reason;
  }
  failed_ = true;
  manager_.wake();
}

HealthManager::HealthManager(RestartPolicy policy) : policy_(policy), thread_([this] { run(); }) {}

HealthManager::~HealthManager() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<Role> HealthManager::add(const std::string& name, std::chrono::milliseconds deadline,
                                         std::function<void()> restart, std::function<void(const std::string&)> give_up) {
  std::shared_ptr<Role> r(new Role(*this, name, deadline, std::move(restart), std::move(give_up)));
  r->beat();
  std::lock_guard lk(mu_);
  roles_.push_back(r);
  history_.try_emplace(name, RoleStatus{name, 0, "", false});
  return r;
}

void HealthManager::remove(const std::shared_ptr<Role>& role) {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return calling_ != role.get(); });  // its restart in progress finishes first
  std::erase(roles_, role);
}

std::vector<RoleStatus> HealthManager::roles() const {
  std::lock_guard lk(mu_);
  std::vector<RoleStatus> out;
  for (const auto& [name, s] : history_) out.push_back(s);
  return out;
}

std::uint64_t HealthManager::restarts() const {
  std::lock_guard lk(mu_);
  std::uint64_t n = 0;
  for (const auto& [name, s] : history_) n += s.restarts;
  return n;
}

void HealthManager::wake() { cv_.notify_all(); }

void HealthManager::schedule(Role& r, const std::string& why, Role::Clock::time_point now,
                             std::vector<std::pair<std::shared_ptr<Role>, std::string>>& given_up) {
  ++r.generation_;  // the old holder, if it wakes, is no longer current
  r.reason_ = why;
  auto& h = history_[r.name_];
  h.last_reason = why;
  while (!r.restarted_at_.empty() && now - r.restarted_at_.front() > policy_.window) r.restarted_at_.pop_front();
  if (static_cast<int>(r.restarted_at_.size()) >= policy_.max_restarts) {
    r.given_up_ = true;
    h.failed = true;
    for (const auto& role : roles_)
      if (role.get() == &r)
        given_up.emplace_back(role, "given up after " + std::to_string(policy_.max_restarts) + " restarts; last: " + why);
    return;
  }
  // Exponential back-off over the restarts still in the window: a role that fails at once
  // after each restart does not spin; one that was healthy for a window starts afresh.
  const auto k = std::min<std::size_t>(r.restarted_at_.size(), 20);
  const auto delay = std::min<std::chrono::milliseconds>(policy_.backoff * (1LL << k), policy_.max_backoff);
  r.restart_due_ = now + delay;
  r.restarted_at_.push_back(now);
}

void HealthManager::run() {
  using Clock = Role::Clock;
  std::unique_lock lk(mu_);
  while (!stop_) {
    auto wait = std::chrono::duration_cast<Clock::duration>(std::chrono::milliseconds(100));
    for (const auto& r : roles_)
      if (r->restart_due_) wait = std::min(wait, std::max(Clock::duration::zero(), *r->restart_due_ - Clock::now()));
    cv_.wait_for(lk, wait);
    if (stop_) break;
    const auto now = Clock::now();
    const auto now_n = now_ns();
    std::vector<std::pair<std::shared_ptr<Role>, std::string>> restart, given_up;
    for (const auto& r : roles_) {
      if (r->given_up_ || r->restart_due_) {  // reports while backing off are of the same failure
        r->failed_ = false;
        if (r->restart_due_ && now >= *r->restart_due_) {
          r->restart_due_.reset();
          r->beat();  // the new holder's deadline starts now
          ++history_[r->name_].restarts;
          restart.emplace_back(r, r->reason_);
        }
        continue;
      }
      const bool late = r->deadline_.count() > 0 && !r->paused_ &&
                        now_n - r->last_beat_ns_.load() > std::chrono::nanoseconds(r->deadline_).count();
      if (r->failed_.exchange(false))
        schedule(*r, r->reason_.empty() ? "failed" : r->reason_, now, given_up);
      else if (late)
        schedule(*r, "missed its heartbeat (" + std::to_string(r->deadline_.count()) + " ms)", now, given_up);
    }
    // Each role's functions run outside the lock, one at a time; remove() waits for them.
    auto registered = [&](const std::shared_ptr<Role>& r) { return std::find(roles_.begin(), roles_.end(), r) != roles_.end(); };
    for (auto& [r, why] : restart) {
      if (!registered(r)) continue;  // removed while an earlier role's function ran
      calling_ = r.get();
      lk.unlock();
      log_text(LogLevel::Warn, "role_restart", "role=" + r->name_ + " reason=\"" + why + "\"");
      try {
        r->restart_();
      } catch (const std::exception& e) {  // no thread to be had, say: a failure of the role, backed off again
        r->failed(std::string("restart failed: ") + e.what());
      }
      lk.lock();
      calling_ = nullptr;
      cv_.notify_all();
    }
    for (auto& [r, why] : given_up) {
      if (!registered(r)) continue;
      calling_ = r.get();
      lk.unlock();
      log_text(LogLevel::Error, "role_failed", "role=" + r->name_ + " reason=\"" + why + "\"");
      try {
        if (r->give_up_) r->give_up_(why);
      } catch (const std::exception& e) {
        log_text(LogLevel::Error, "role_give_up_failed", "role=" + r->name_ + " reason=\"" + e.what() + "\"");
      }
      lk.lock();
      calling_ = nullptr;
      cv_.notify_all();
    }
  }
}

}  // namespace nexus::daemon
