#include "daemon/env/rollout_autoscaler.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <regex>

#include "daemon/env/engine_registry.hpp"
#include "daemon/log/log_text.hpp"

extern char** environ;

namespace nexus::env {

AutoscaleDecision decide_scale(const AutoscalePolicy& p, const AutoscaleView& v) {
  AutoscaleDecision d;
  if (p.max_engines <= 0) return d;
  // Shared engines only: another user's own engines serve only that user's tenants. Room: free
  // sessions on them, and what the engines still starting will bring.
  int live = v.starting, room = v.starting * p.sessions_per_engine;
  for (const auto& e : v.engines)
    if (e.shared && !e.draining) ++live, room += std::max(0, e.capacity - e.sessions);
  if (live < p.min_engines) {
    d.start = p.min_engines - live;
    d.reason = std::to_string(live) + " engine(s), the minimum is " + std::to_string(p.min_engines);
    return d;
  }
  if (v.now - v.last_action < p.cooldown) return d;
  const int unserved = v.waiting_sessions - room;  // sessions in nexusd that no engine has room for
  if (unserved > 0) {
    if (live >= p.max_engines) return d;
    const int wanted = (unserved + p.sessions_per_engine - 1) / p.sessions_per_engine;
    d.start = std::min(p.max_engines - live, wanted);
    d.reason = std::to_string(v.waiting_sessions) + " session(s) run in nexusd, " + std::to_string(unserved) +
               " more than the engines have room for";
    return d;
  }
  if (live <= p.min_engines) return d;
  // Idle: nexusd's own engine that has stepped nothing for longest, one per decision, while the
  // others keep room for every session waiting in nexusd.
  const AutoscaleView::Engine* idlest = nullptr;
  for (const auto& e : v.engines)
    if (e.own && e.shared && !e.draining && e.sessions == 0 && v.now - e.last_busy >= p.idle_after &&
        (!idlest || e.last_busy < idlest->last_busy))
      idlest = &e;
  if (idlest && v.waiting_sessions <= room - idlest->capacity) {
    d.drain.push_back(idlest->id);
    d.reason = "engine " + std::to_string(idlest->id) + " idle for " +
               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(v.now - idlest->last_busy).count()) + " s";
  }
  return d;
}

RolloutAutoscaler::RolloutAutoscaler(EngineRegistry& engines, AutoscalePolicy policy, std::vector<std::string> spawn,
                                     std::string socket)
    : engines_(engines), policy_(policy), spawn_(std::move(spawn)), socket_(std::move(socket)) {
  if (can_start()) thread_ = std::thread([this] { run(); });  // decisions (when on), and reaping
}

RolloutAutoscaler::~RolloutAutoscaler() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Engines it started as its children drain (SIGTERM) on their own time; nexusd does not wait.
  for (pid_t pid : children_) ::kill(pid, SIGTERM);
}

RolloutAutoscaler::Log RolloutAutoscaler::log() const {
  std::lock_guard lk(mu_);
  return log_;
}

int RolloutAutoscaler::starting() {
  std::lock_guard lk(mu_);
  forget_attached(AutoscaleView::Clock::now());  // an engine that attached is not starting any more
  return static_cast<int>(starting_.size());
}

void RolloutAutoscaler::record(const std::string& decision) {
  std::lock_guard lk(mu_);
  log_.last = decision;
}

void RolloutAutoscaler::start(int n, const std::string& why) {
  std::lock_guard lk(mu_);
  for (int k = 0; k < n; ++k) start_one();
  log_.starts += static_cast<std::uint64_t>(n);
  log_.last = "start " + std::to_string(n) + ": " + why;
}

void RolloutAutoscaler::start_one() {
  const std::string n = std::to_string(next_n_++);
  std::vector<std::string> argv;
  for (auto a : spawn_) {
    a = std::regex_replace(a, std::regex("\\{socket\\}"), socket_);
    argv.push_back(std::regex_replace(a, std::regex("\\{n\\}"), n));
  }
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
  if (rc != 0) {
    daemon::log_text(daemon::LogLevel::Warn, "rollout_autoscale_spawn_failed",
                     "command=" + argv[0] + " reason=\"" + std::strerror(rc) + "\"");
    return;
  }
  children_.push_back(pid);
  starting_.emplace_back("auto-" + n, AutoscaleView::Clock::now());
}

void RolloutAutoscaler::forget_attached(AutoscaleView::Clock::time_point now) {
  std::vector<std::string> names;
  for (const auto& e : engines_.engines()) names.push_back(e.name);
  std::erase_if(starting_, [&](const auto& s) {
    return std::find(names.begin(), names.end(), s.first) != names.end() || now - s.second > policy_.start_grace;
  });
}

void RolloutAutoscaler::run() {
  AutoscaleView::Clock::time_point last_action{};
  for (;;) {
    std::unique_lock lk(mu_);
    if (cv_.wait_for(lk, std::chrono::seconds(1), [&] { return stop_; })) return;
    std::erase_if(children_, [](pid_t pid) {  // reap what exited
      int status = 0;
      return ::waitpid(pid, &status, WNOHANG) == pid;
    });
    AutoscaleView v;
    v.now = AutoscaleView::Clock::now();
    v.last_action = last_action;
    forget_attached(v.now);
    for (const auto& e : engines_.engines())
      v.engines.push_back({e.id, e.shared && e.name.rfind("auto-", 0) == 0, e.shared, e.draining, e.sessions, e.capacity,
                           e.last_busy});
    v.starting = static_cast<int>(starting_.size());
    v.waiting_sessions = engines_.sessions_in_nexusd();
    const auto d = decide_scale(policy_, v);
    if (d.reason.empty()) continue;
    for (int k = 0; k < d.start; ++k) start_one();
    for (auto id : d.drain) engines_.drain(id);
    last_action = v.now;
    daemon::log_text(daemon::LogLevel::Info, "rollout_autoscale",
                     "start=" + std::to_string(d.start) + " drain=" + std::to_string(d.drain.size()) + " reason=\"" +
                         d.reason + "\"");
    log_.starts += static_cast<std::uint64_t>(d.start);
    log_.drains += d.drain.size();
    log_.last = (d.start ? "start " + std::to_string(d.start) : "drain engine " + std::to_string(d.drain.front())) +
                ": " + d.reason;
  }
}

}  // namespace nexus::env
