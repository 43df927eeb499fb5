#include "daemon/health/health_manager.hpp"

#include "daemon/log/log_text.hpp"

namespace nexus::daemon {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void Role::beat() { last_beat_ns_.store(now_ns(), std::memory_order_relaxed); }

void Role::failed(const std::string& reason) {
  {
    std::lock_guard lk(manager_.mu_);
    reason_ = reason;
  }
  failed_ = true;
  manager_.wake();
}

HealthManager::HealthManager() : thread_([this] { run(); }) {}

HealthManager::~HealthManager() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<Role> HealthManager::add(const std::string& name, std::chrono::milliseconds deadline,
                                         std::function<void()> restart) {
  std::shared_ptr<Role> r(new Role(*this, name, deadline, std::move(restart)));
  r->beat();
  std::lock_guard lk(mu_);
  roles_.push_back(r);
  history_.try_emplace(name, RoleStatus{name, 0, ""});
  return r;
}

void HealthManager::remove(const std::shared_ptr<Role>& role) {
  std::lock_guard lk(mu_);
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

void HealthManager::run() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(100));
    const auto now = now_ns();
    std::vector<std::pair<std::shared_ptr<Role>, std::string>> due;
    for (const auto& r : roles_) {
      const bool late = r->deadline_.count() > 0 && !r->paused_ &&
                        now - r->last_beat_ns_.load() > std::chrono::nanoseconds(r->deadline_).count();
      if (r->failed_.exchange(false)) due.emplace_back(r, r->reason_.empty() ? "failed" : r->reason_);
      else if (late) due.emplace_back(r, "missed its heartbeat (" + std::to_string(r->deadline_.count()) + " ms)");
    }
    for (auto& [r, why] : due) {
      ++r->generation_;  // the old holder, if it wakes, is no longer current
      r->beat();         // the new holder's deadline starts now
      auto& h = history_[r->name_];
      ++h.restarts;
      h.last_reason = why;
    }
    lk.unlock();
    for (auto& [r, why] : due) {
      log_text(LogLevel::Warn, "role_restart", "role=" + r->name_ + " reason=\"" + why + "\"");
      r->restart_();
    }
    lk.lock();
  }
}

}  // namespace nexus::daemon
