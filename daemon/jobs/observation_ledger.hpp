// Per Unix user bound on the observations that adapter tenants' RL jobs keep in nexusd's memory.
//
// An adapter tenant's RL records keep every step's observation, since its updates re-run the
// adapted backbone on them (daemon/rl/rl_job.hpp, kMaxHeldObservationBytes bounds one job). A
// tenant runs one RL job at a time, but a user may bind many names, so without a bound per user
// one lab member's jobs could take the box's memory from everyone ([jobs]
// rl_observation_mib_per_uid). A job takes what its records may hold at once when it starts
// (before its loops run) and gives it back when its run object is gone (its records freed).
// `nexusctl usage` shows each user's held bytes against the bound.
//
// Thread safety: every member may be called from any thread.
#pragma once
#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

namespace nexus::daemon {

// Thrown through the RL job's start when the user's bound would be passed (QuotaExceeded).
struct ObservationQuotaExceeded : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ObservationLedger {
 public:
  explicit ObservationLedger(std::uint64_t per_uid) : per_uid_(per_uid) {}

  // Takes `bytes` for `uid`, or throws ObservationQuotaExceeded (nothing taken) saying by how much.
  void take(uid_t uid, std::uint64_t bytes) {
    std::lock_guard lk(mu_);
    auto& held = held_[uid];
    if (bytes > per_uid_ || held > per_uid_ - bytes) {
      const std::uint64_t others = held;
      if (held == 0) held_.erase(uid);
      throw ObservationQuotaExceeded("this job's records would keep " + mib(bytes) +
                                     " of observations in nexusd's memory and your other RL jobs keep " + mib(others) +
                                     ": over your " + mib(per_uid_) +
                                     " ([jobs] rl_observation_mib_per_uid); stop one, or use fewer sessions, a shorter "
                                     "horizon or a smaller queue_capacity");
    }
    held += bytes;
  }
  void give(uid_t uid, std::uint64_t bytes) {
    std::lock_guard lk(mu_);
    auto it = held_.find(uid);
    if (it == held_.end()) return;
    it->second -= std::min(it->second, bytes);
    if (it->second == 0) held_.erase(it);
  }
  std::map<uid_t, std::uint64_t> held() const {
    std::lock_guard lk(mu_);
    return held_;
  }
  std::uint64_t per_uid() const { return per_uid_; }

 private:
  static std::string mib(std::uint64_t bytes) {  // one decimal: 1.5 MiB, not a rounded 2
    char text[32];
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return text;
  }

  const std::uint64_t per_uid_;
  mutable std::mutex mu_;
  std::map<uid_t, std::uint64_t> held_;  // GUARDED_BY(mu_); users holding nothing are absent
};

// What one job took, given back when it goes (declared before the job it accounts for, so that
// the job's records are freed first).
class ObservationHold {
 public:
  ObservationHold(ObservationLedger& ledger, uid_t uid) : ledger_(ledger), uid_(uid) {}
  ~ObservationHold() {
    if (bytes_) ledger_.give(uid_, bytes_);
  }
  ObservationHold(const ObservationHold&) = delete;
  ObservationHold& operator=(const ObservationHold&) = delete;
  void take(std::uint64_t bytes) {  // once per job
    ledger_.take(uid_, bytes);
    bytes_ += bytes;
  }

 private:
  ObservationLedger& ledger_;
  const uid_t uid_;
  std::uint64_t bytes_ = 0;
};

}  // namespace nexus::daemon
