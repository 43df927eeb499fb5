#include "daemon/model/model_service.hpp"

#include <torch/torch.h>

#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "daemon/log/log_text.hpp"
#include "daemon/model/backbone.hpp"
#include "daemon/model/group_executor.hpp"
#include "daemon/model/policy_port.hpp"
#include "daemon/model/slot_registry.hpp"
#include "daemon/model/torchscript_backbone.hpp"
#include "daemon/model/work_queues.hpp"

namespace nexus::model {

using daemon::log_text;
using daemon::LogLevel;

using detail::Work;
using metrics::Service;

struct ModelService::Impl {
  Impl(const ModelConfig& c, std::shared_ptr<metrics::Accounting> a) : config(c), accounting(std::move(a)) {}

  // A tenant with no training work for this long is idle: it comes back with no banked credit.
  static constexpr auto kIdleGrace = std::chrono::seconds(1);

  void submit(Work w) {
    {
      std::lock_guard lk(mu);
      bool returning = false;
      if (!detail::is_inference(w)) {
        const auto now = sched::Clock::now();
        auto [it, fresh] = last_training.try_emplace(detail::tenant_id(detail::tenant_of(w)), now);
        returning = fresh || now - it->second > kIdleGrace;
        it->second = now;
      }
      queues.push(std::move(w), share, returning);
    }
    cv.notify_one();
  }

  // One generation of the executor's role: a loop that throws reports it and leaves; the Health
  // Manager starts the next generation (the queues and slots are as the last turn left them).
  void run(std::uint64_t generation) {
    try {
      serve(generation);
    } catch (const std::exception& e) {
      if (!role) throw;  // no manager: nothing would restart it
      role->failed(std::string("executor: ") + e.what(), generation);
    }
  }

  // The executor: one turn at a time, inference first (work_queues.hpp).
  void serve(std::uint64_t generation) {
    // A fixed thread count for the daemon's life: reductions split across threads the same way
    // in every pass (deterministic mode relies on it).
    torch::set_num_threads(config.torch_threads > 0 ? config.torch_threads
                                                    : static_cast<int>(std::thread::hardware_concurrency()));
    if (config.deterministic) at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    const sched::TrainingPolicy training{config.batch, config.group_window_s};
    auto next_evict = sched::Clock::now();
    for (;;) {
      std::optional<detail::WorkQueues::Turn> turn;
      {
        std::unique_lock lk(mu);
        if (stop || (role && !role->current(generation))) return;
        if (!queues.empty() && throw_once.exchange(false)) throw std::runtime_error("injected fault: the executor threw");
        std::chrono::microseconds wait = std::chrono::seconds(1);  // wakes for eviction at least
        if (!queues.empty()) {
          const auto now = sched::Clock::now();
          std::set<std::uint64_t> training_active;
          for (const auto& [id, at] : last_training)
            if (now - at < std::chrono::seconds(2) && attached_ids.count(id)) training_active.insert(id);
          std::chrono::microseconds until{0};
          const bool owed = busy_train < config.min_training_share * (busy_train + busy_infer);
          turn = queues.next(now, config.batch, training, attached.size(), training_active, share, owed, until);
          wait = std::min(wait, until);
        }
        if (!turn) cv.wait_for(lk, wait);
      }
      if (turn) execute(*turn);
      if (const auto now = sched::Clock::now(); now >= next_evict) {
        registry->evict_idle(now);
        next_evict = now + std::chrono::seconds(1);
      }
      std::lock_guard lk(stats_mu);  // the registry is the executor's: published here for stats()
      stats.slots_resident = registry->resident();
      stats.slots_evicted = registry->evicted();
    }
  }

  void execute(detail::WorkQueues::Turn& turn) {
    registry->apply_releases();  // a released name's old slot is gone before its new owner's turn
    const auto service = turn.inference ? Service::Inference : Service::Training;
    const auto& leader = detail::tenant_of(turn.works.front());
    metrics::BusyScope busy(accounting.get(), service, leader);
    if (accounting)
      for (const auto& w : turn.works)
        accounting->queue_wait(detail::tenant_of(w), service,
                               std::chrono::duration<double, std::micro>(busy.started() - detail::arrival_of(w)).count());
    std::map<std::string, double> charged;
    if (detail::is_batchable(turn.works.front()))
      charged = executor->run(turn.works, service);
    else
      charged = run_single(turn.works.front());
    const auto end = sched::Clock::now();
    const double took = std::chrono::duration<double>(end - busy.started()).count();
    {
      // Each queue's recent share of the executor: exponentially decaying busy seconds
      // (a 5 s time constant), for the training floor.
      std::lock_guard lk(mu);
      const double decay = std::exp(-std::chrono::duration<double>(end - last_turn_end).count() / 5.0);
      busy_train *= decay, busy_infer *= decay;
      (turn.inference ? busy_infer : busy_train) += took;
      last_turn_end = end;
    }
    if (turn.inference) return;  // fair share is of training compute
    {
      std::lock_guard lk(stats_mu);
      stats.longest_training_turn_s = std::max(stats.longest_training_turn_s, took);
    }
    std::lock_guard lk(mu);
    for (const auto& [tenant, seconds] : charged) share.charge(detail::tenant_id(tenant), seconds);
  }

  // A turn of its own: a slot operation, or an RL update minibatch.
  std::map<std::string, double> run_single(Work& w) {
    std::map<std::string, double> charged;
    if (detail::cancelled(w)) return charged;
    const auto& tenant = detail::tenant_of(w);
    const auto t0 = sched::Clock::now();
    if (auto* s = std::get_if<detail::SlotWork>(&w)) {
      auto* slot = registry->find(tenant);
      if (!slot) {
        detail::fail(w, Fault::NotRegistered, "the tenant has no slot: register it first");
        return charged;
      }
      try {
        s->fn(*slot->trainer);
        s->done.set_value();
      } catch (const std::exception& e) {
        detail::fail(w, Fault::Internal, e.what());
      }
      const double seconds = std::chrono::duration<double>(sched::Clock::now() - t0).count();
      charged[tenant] = seconds;
      if (accounting) accounting->charge(tenant, Service::Training, seconds, 0, 1);
      return charged;
    }
    auto& r = std::get<detail::TenantWork>(w).request;
    r.done(std::visit(
        [&](auto& o) -> Result {
          using T = std::decay_t<decltype(o)>;
          if constexpr (std::is_same_v<T, op::Register>) {
            auto result = registry->register_tenant(tenant, r.uid, o);
            if (!std::holds_alternative<Failure>(result)) note_registered(tenant);
            return result;
          } else if constexpr (std::is_same_v<T, op::Load>) {
            auto result = registry->load(tenant, r.uid, o.tag);
            if (!std::holds_alternative<Failure>(result)) note_registered(tenant);
            return result;
          } else if constexpr (std::is_same_v<T, op::Backbone>) {
            const auto& bb = backbone->config();
            return BackboneInfo{bb.name, bb.image_size, bb.max_views, bb.max_tokens, bb.dim};
          } else if constexpr (std::is_same_v<T, op::Publish>) {
            return registry->publish(tenant);
          } else if constexpr (std::is_same_v<T, op::Save>) {
            return registry->save(tenant, r.uid, o.tag);
          } else if constexpr (std::is_same_v<T, op::Digest>) {
            return registry->digest(tenant);
          } else {
            return Failure{Fault::Internal, "a batchable request went alone"};
          }
        },
        r.op));
    return charged;
  }

  // A registered, attached tenant is waited for when inference groups form.
  void note_registered(const std::string& tenant) {
    std::lock_guard lk(mu);
    if (attached_names.count(tenant)) attached.insert(tenant);
  }

  class Policy;

  const ModelConfig config;
  std::shared_ptr<metrics::Accounting> accounting;
  std::unique_ptr<Backbone> backbone;
  std::unique_ptr<detail::SlotRegistry> registry;    // slots: executor thread (pins: any)
  std::unique_ptr<detail::GroupExecutor> executor;   // executor thread only

  std::mutex mu;
  std::condition_variable cv;
  detail::WorkQueues queues;                                    // GUARDED_BY(mu)
  sched::FairShare share;                                       // GUARDED_BY(mu)
  std::map<std::uint64_t, sched::Clock::time_point> last_training;  // GUARDED_BY(mu)
  std::set<std::string> attached_names;                         // GUARDED_BY(mu): attached now
  std::set<std::uint64_t> attached_ids;                         // GUARDED_BY(mu): the same, as ids
  std::set<std::string> attached;                               // GUARDED_BY(mu): attached and registered
  bool stop = false;                                            // GUARDED_BY(mu)
  double busy_train = 0, busy_infer = 0;                        // GUARDED_BY(mu): recent, decaying
  sched::Clock::time_point last_turn_end = sched::Clock::now(); // GUARDED_BY(mu)

  mutable std::mutex stats_mu;
  ModelStats stats;  // GUARDED_BY(stats_mu)
  std::shared_ptr<daemon::Role> role;  // the executor's (Health Manager); null without one
  std::atomic<bool> throw_once{false};
  std::mutex threads_mu;
  std::thread thread;                  // GUARDED_BY(threads_mu): the executor now
  std::vector<std::thread> retired;    // GUARDED_BY(threads_mu): generations that threw and left
};

// An RL job's view of the service: its rollout steps go on the Inference Queue and its update
// minibatches on the Training Queue, like any tenant's requests.
class ModelService::Impl::Policy final : public PolicyPort {
 public:
  Policy(Impl& impl, std::string tenant) : impl_(impl), tenant_(std::move(tenant)) {}
  Acted act(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask,
            const torch::Tensor& state) override {
    detail::ActWork w;
    w.tenant = tenant_, w.images = images, w.tokens = tokens, w.mask = mask, w.state = state;
    auto done = w.done.get_future();
    impl_.submit(std::move(w));
    return done.get();
  }
  void with_slot(const std::function<void(TenantSlot&)>& fn) override {
    detail::SlotWork w;
    w.tenant = tenant_, w.fn = fn;
    auto done = w.done.get_future();
    impl_.submit(std::move(w));
    done.get();
  }
  std::int64_t image_size() const override { return impl_.backbone->config().image_size; }
  std::int64_t max_tokens() const override { return impl_.backbone->config().max_tokens; }
  std::int64_t feature_dim() const override { return impl_.backbone->config().dim; }

 private:
  Impl& impl_;
  std::string tenant_;
};

ModelService::ModelService(const ModelConfig& config, std::shared_ptr<metrics::Accounting> accounting,
                           daemon::HealthManager* health, bool inject_executor_throw)
    : impl_(std::make_unique<Impl>(config, std::move(accounting))), health_(health) {
  const bool builtin = config.backbone != "torchscript";
  if (!builtin) {
    if (config.weights.empty()) throw std::runtime_error("--backbone torchscript needs --weights FILE.pt");
    impl_->backbone = load_torchscript_backbone(config.weights);
  } else {
    auto bc = named_backbone(config.backbone);
    if (!bc) throw std::runtime_error("unknown backbone '" + config.backbone + "' (tiny, small, torchscript)");
    impl_->backbone = make_builtin_backbone(*bc, config.weights);
  }
  const auto& bc = impl_->backbone->config();
  log_text(config.weights.empty() ? LogLevel::Warn : LogLevel::Info, "backbone",
           "name=" + bc.name + " weights=" + (config.weights.empty() ? "none(seeded_init_not_pretrained)" : config.weights) +
               " dim=" + std::to_string(bc.dim) + " image_size=" + std::to_string(bc.image_size) +
               " deterministic=" + (config.deterministic ? "true" : "false"));
  for (const auto& [tenant, p] : config.tenants)
    impl_->share.configure(detail::tenant_id(tenant), p.weight, p.priority);
  impl_->registry = std::make_unique<detail::SlotRegistry>(config, bc);
  impl_->executor = std::make_unique<detail::GroupExecutor>(
      *impl_->backbone, *impl_->registry,
      detail::make_cost_model(*impl_->backbone, bc, config.max_request_gflop, builtin), config.deterministic,
      impl_->accounting.get(), impl_->stats, impl_->stats_mu);
  impl_->throw_once = inject_executor_throw;
  if (health_)
    impl_->role = health_->add("executor", std::chrono::milliseconds(0), [impl = impl_.get()] {
      std::lock_guard lk(impl->threads_mu);
      impl->retired.push_back(std::move(impl->thread));
      impl->thread = std::thread([impl, g = impl->role->generation()] { impl->run(g); });
    });
  std::lock_guard lk(impl_->threads_mu);
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(1); });
}

ModelService::~ModelService() {
  if (impl_->role) health_->remove(impl_->role);  // no restart from here on
  {
    std::lock_guard lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  {
    std::lock_guard lk(impl_->threads_mu);
    impl_->thread.join();
    for (auto& t : impl_->retired) t.join();
  }
  std::vector<Work> left;
  {
    std::lock_guard lk(impl_->mu);
    left = impl_->queues.drain();
  }
  for (auto& w : left)
    if (!detail::cancelled(w)) detail::fail(w, Fault::Internal, "nexusd is stopping");
}

void ModelService::submit(Request request) { impl_->submit(detail::TenantWork{std::move(request)}); }

void ModelService::tenant_attached(const std::string& tenant) {
  impl_->registry->attached(tenant);
  std::lock_guard lk(impl_->mu);
  impl_->attached_names.insert(tenant);
  impl_->attached_ids.insert(detail::tenant_id(tenant));
}

void ModelService::tenant_detached(const std::string& tenant) {
  impl_->registry->detached(tenant);
  {
    std::lock_guard lk(impl_->mu);
    impl_->attached_names.erase(tenant);
    impl_->attached_ids.erase(detail::tenant_id(tenant));
    impl_->attached.erase(tenant);
  }
  impl_->cv.notify_one();  // a waiting group may now hold every active tenant
}

void ModelService::tenant_released(const std::string& tenant) { impl_->registry->released(tenant); }

void ModelService::pin_version(const std::string& tenant, std::uint64_t version) { impl_->registry->pin(tenant, version); }
void ModelService::unpin_version(const std::string& tenant, std::uint64_t version) {
  impl_->registry->unpin(tenant, version);
}

std::unique_ptr<PolicyPort> ModelService::policy_port(const std::string& tenant) {
  return std::make_unique<Impl::Policy>(*impl_, tenant);
}

ModelStats ModelService::stats() const {
  ModelStats s;
  {
    std::lock_guard lk(impl_->stats_mu);
    s = impl_->stats;
  }
  std::lock_guard lk(impl_->mu);
  s.inference_queued = impl_->queues.inference_size();
  s.training_queued = impl_->queues.training_size();
  return s;
}

const BackboneConfig& ModelService::backbone() const { return impl_->backbone->config(); }

}  // namespace nexus::model
