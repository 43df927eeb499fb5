// An RL job's update loop: it takes the rollout records the loops produced, runs the policy
// update (PPO or GRPO, with the demonstrations' term if asked) as minibatches on the tenant's
// slot, publishes a version, and stops between minibatches when asked.
#include <optional>

#include "daemon/rl/rl_job.hpp"

namespace nexus::rl {
namespace {
struct StopRequested {};  // thrown between update minibatches once the job is asked to stop
}  // namespace

void RlJob::consume(std::uint64_t generation) {
  auto superseded = [&] { return update_role_ && !update_role_->current(generation); };
  try {
    // A restarted loop goes on from the last published iteration; the record its predecessor
    // was updating on is gone, so a synchronous producer waiting for it must not wait longer.
    std::uint64_t version = progress().version;
    if (generation > 1) {
      {
        std::lock_guard lk(mu_);
        records_used_ = std::max(records_used_, records_taken_);
      }
      record_used_cv_.notify_all();
    }
    int it = progress().iterations;
    for (; it < config_.iterations && !stop_;) {
      auto record = queue_.pop();
      if (!record || superseded()) break;
      {
        std::lock_guard lk(mu_);
        ++records_taken_;
      }
      const long age = static_cast<long>(version - record->version);
      const double weight = staleness_weight(config_.staleness, age);
      if (weight == 0) {
        {
          std::lock_guard lk(mu_);
          ++progress_.records_dropped;
        }
        record_used();
        continue;
      }
      if (record->version < version) {
        std::lock_guard lk(mu_);
        ++progress_.records_behind;
      }
      // A stop (cancel, detach) is honoured between minibatches, not after the whole update.
      // An adapter tenant's record carries its observations: its minibatches re-run the adapted backbone.
      const SlotRunner on_slot = [this, adapted = record->images.defined()](const SlotFunction& fn) {
        if (stop_) throw StopRequested{};
        if (adapted)
          policy_.with_adapted_slot(fn);
        else
          policy_.with_slot([&](model::TenantSlot& slot) { fn(slot, {}); });
      };
      std::optional<DemoTerm> demos;
      if (uses_demos()) demos = draw_demos();
      const DemoTerm* term = demos ? &*demos : nullptr;
      // An adapter tenant's minibatches run the backbone: cut into turns as SFT steps are.
      const UpdateTurns turns{[this] { return policy_.update_turn(); }, &update_sizer_};
      const UpdateStats stats =
          config_.algorithm == "ppo"
              ? ppo_update(on_slot, value_, *value_opt_, *record, config_.update, weight, shuffle_, term, turns)
              : grpo_update(on_slot, *record, config_.update, weight, shuffle_, term, turns);
      if (superseded()) return;  // the update it finished is its successor's to publish or redo
      policy_.with_slot([&](model::TenantSlot& slot) { version = slot.publish(); });
      ++it;
      std::unique_lock lk(mu_);
      progress_.iterations = it;
      progress_.version = version;
      progress_.policy_loss = stats.policy_loss;
      progress_.value_loss = stats.value_loss;
      progress_.entropy = stats.entropy;
      progress_.demo_loss = stats.demo_loss;
      progress_.split_minibatches += static_cast<std::uint64_t>(stats.split_minibatches);
      if (weight < 1) ++progress_.records_downweighted;
      lk.unlock();
      // After the last update the job ends (below) before a synchronous producer may go on.
      if (it < config_.iterations) record_used();
    }
    if (superseded()) return;
    {
      std::lock_guard lk(mu_);
      // A loop that left early (a stop, a closed queue) did not finish the job.
      if (progress_.state == RunState::Running) progress_.state = it >= config_.iterations ? RunState::Done : RunState::Stopped;
      stop_ = true;  // under mu_, as in fail()
    }
    queue_.close();
    record_used_cv_.notify_all();
  } catch (const StopRequested&) {
    // stop() set the state; the update in progress was abandoned between minibatches
  } catch (const std::exception& e) {
    loop_failed(update_role_.get(), generation, std::string("update: ") + e.what());
  } catch (...) {
    loop_failed(update_role_.get(), generation, "update: unknown exception");
  }
}

}  // namespace nexus::rl
