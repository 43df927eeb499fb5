#include "daemon/master/tenant_lanes.hpp"

#include "daemon/log/log_text.hpp"

namespace nexus::daemon {

void TenantLanes::run(Lane& lane) {
  std::unique_lock lk(lane.mu);
  for (;;) {
    lane.cv.wait(lk, [&] { return lane.closing || !lane.tasks.empty(); });
    if (lane.closing) break;
    auto task = std::move(lane.tasks.front());
    lane.tasks.pop_front();
    lk.unlock();
    try {
      task();  // tasks answer their own errors
    } catch (...) {  // one that does not is a bug: its request goes unanswered, the lane goes on
      log_text(LogLevel::Error, "lane_task_failed", "reason=\"a task threw\"");
    }
    lk.lock();
  }
  lane.tasks.clear();
  lane.finished = true;
}

void TenantLanes::post(const std::string& tenant, std::function<void()> task) {
  std::shared_ptr<Lane> lane;
  {
    std::lock_guard lk(mu_);
    reap();
    auto& l = lanes_[tenant];
    if (!l) {
      l = std::make_shared<Lane>();
      Lane* raw = l.get();
      l->thread = std::thread([raw] { run(*raw); });
    }
    lane = l;
  }
  {
    std::lock_guard lk(lane->mu);
    lane->tasks.push_back(std::move(task));
  }
  lane->cv.notify_one();
}

void TenantLanes::close(const std::string& tenant) {
  std::lock_guard lk(mu_);
  auto it = lanes_.find(tenant);
  if (it == lanes_.end()) return;
  {
    std::lock_guard lane_lk(it->second->mu);
    it->second->closing = true;
  }
  it->second->cv.notify_one();
  retired_.push_back(std::move(it->second));
  lanes_.erase(it);
  reap();
}

void TenantLanes::reap() {
  for (auto it = retired_.begin(); it != retired_.end();) {
    bool done;
    {
      std::lock_guard lk((*it)->mu);
      done = (*it)->finished;
    }
    if (!done) {
      ++it;
      continue;
    }
    (*it)->thread.join();
    it = retired_.erase(it);
  }
}

std::size_t TenantLanes::lanes() const {
  std::lock_guard lk(mu_);
  return lanes_.size();
}

TenantLanes::~TenantLanes() {
  std::vector<std::shared_ptr<Lane>> all;
  {
    std::lock_guard lk(mu_);
    for (auto& [name, lane] : lanes_) all.push_back(lane);
    for (auto& lane : retired_) all.push_back(lane);
    lanes_.clear();
    retired_.clear();
  }
  for (auto& lane : all) {
    {
      std::lock_guard lk(lane->mu);
      lane->closing = true;
    }
    lane->cv.notify_one();
  }
  for (auto& lane : all) lane->thread.join();
}

}  // namespace nexus::daemon
