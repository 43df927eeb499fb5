// The plain structs of libnexus as Python classes with keyword construction, attribute access
// and a readable repr: HeadSpec(kind="flow", chunk=4), info.state_dim, print(status).
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "native.hpp"

namespace nexus::python {
namespace {

// One struct's binding: fields by name, then `Cls(**fields)` (an unknown name is an
// AttributeError, so a typo never passes silently), `_fields` and a repr listing them.
template <class T>
class Record {
 public:
  Record(py::module_& m, const char* name, const char* doc) : cls_(m, name, doc) {
    cls_.def(py::init([](const py::kwargs& fields) {
      py::object obj = py::cast(T{});
      for (const auto& [key, value] : fields) obj.attr(key) = value;
      return obj.cast<T>();
    }));
  }
  template <class M>
  Record& field(const char* name, M T::*member) {
    cls_.def_readwrite(name, member);
    names_.emplace_back(name);
    return *this;
  }
  ~Record() noexcept(false) {
    const auto names = names_;
    cls_.attr("_fields") = py::tuple(py::cast(names));
    cls_.def("__repr__", [names](py::object self) {
      std::string out = py::str(py::type::of(self).attr("__name__")).cast<std::string>() + "(";
      for (std::size_t i = 0; i < names.size(); ++i)
        out += (i ? ", " : "") + names[i] + "=" + py::repr(self.attr(names[i].c_str())).cast<std::string>();
      return out + ")";
    });
    cls_.def("__eq__", [names](py::object a, py::object b) {
      if (!py::type::of(a).is(py::type::of(b))) return false;
      for (const auto& n : names)
        if (!a.attr(n.c_str()).equal(b.attr(n.c_str()))) return false;
      return true;
    });
  }

 private:
  py::class_<T> cls_;
  std::vector<std::string> names_;
};

void bind_model_records(py::module_& m) {
  Record<HeadSpec>(m, "HeadSpec", "A tenant's action head: kind mlp_chunk, flow or gaussian.")
      .field("kind", &HeadSpec::kind).field("state_dim", &HeadSpec::state_dim)
      .field("action_dim", &HeadSpec::action_dim).field("chunk", &HeadSpec::chunk)
      .field("hidden", &HeadSpec::hidden).field("flow_steps", &HeadSpec::flow_steps)
      .field("flow_noise", &HeadSpec::flow_noise).field("token_queries", &HeadSpec::token_queries)
      .field("adapter", &HeadSpec::adapter);
  Record<AdapterSpec>(m, "AdapterSpec",
                      "A low-rank adapter on the backbone: rank 1..64 (0: none), alpha (0: = rank), targets "
                      "(bits q 1, k 2, v 4, o 8, mlp_in 16, mlp_out 32; 0: all), blocks (bit i: block i; 0: all).")
      .field("rank", &AdapterSpec::rank).field("alpha", &AdapterSpec::alpha)
      .field("targets", &AdapterSpec::targets).field("blocks", &AdapterSpec::blocks);
  Record<OptimizerSpec>(m, "OptimizerSpec", "AdamW with global grad-norm clipping.")
      .field("lr", &OptimizerSpec::lr).field("beta1", &OptimizerSpec::beta1).field("beta2", &OptimizerSpec::beta2)
      .field("weight_decay", &OptimizerSpec::weight_decay).field("grad_clip", &OptimizerSpec::grad_clip);
  Record<TenantSpec>(m, "TenantSpec", "What register() creates: views per sample, head, optimizer, seed.")
      .field("views", &TenantSpec::views).field("head", &TenantSpec::head)
      .field("optimizer", &TenantSpec::optimizer).field("seed", &TenantSpec::seed);
  Record<BackboneInfo>(m, "BackboneInfo", "The resident backbone's geometry.")
      .field("name", &BackboneInfo::name).field("image_size", &BackboneInfo::image_size)
      .field("max_views", &BackboneInfo::max_views).field("max_tokens", &BackboneInfo::max_tokens)
      .field("feature_dim", &BackboneInfo::feature_dim);
  Record<SlotDigest>(m, "SlotDigest", "Fingerprints of a slot: parameters, training state, step, latest version.")
      .field("parameters", &SlotDigest::parameters).field("optimizer", &SlotDigest::optimizer)
      .field("step", &SlotDigest::step).field("latest_version", &SlotDigest::latest_version);
  Record<SftResult>(m, "SftResult", "One SFT step's loss, gradient norm and the slot's step after it.")
      .field("loss", &SftResult::loss).field("grad_norm", &SftResult::grad_norm).field("step", &SftResult::step);
  Record<FeaturesResult>(m, "FeaturesResult", "What features mode wrote: samples x dim float32 at the out tensor.")
      .field("samples", &FeaturesResult::samples).field("dim", &FeaturesResult::dim);
  Record<DigestResult>(m, "DigestResult", "FNV-1a 64 of a tensor's bytes, as the daemon read them in place.")
      .field("fnv1a", &DigestResult::fnv1a).field("bytes", &DigestResult::bytes);
}

void bind_env_records(py::module_& m) {
  Record<EnvSessions>(m, "EnvSessions", "Environment sessions opened in nexusd.")
      .field("ids", &EnvSessions::ids).field("image_size", &EnvSessions::image_size)
      .field("state_dim", &EnvSessions::state_dim).field("action_dim", &EnvSessions::action_dim)
      .field("max_steps", &EnvSessions::max_steps);
  Record<EnvStepResult>(m, "EnvStepResult", "Per session: reward, done, success, failed, instruction, error.")
      .field("reward", &EnvStepResult::reward).field("done", &EnvStepResult::done)
      .field("success", &EnvStepResult::success).field("failed", &EnvStepResult::failed)
      .field("truncated", &EnvStepResult::truncated)
      .field("instructions", &EnvStepResult::instructions).field("errors", &EnvStepResult::errors)
      .field("engines", &EnvStepResult::engines).field("interrupted", &EnvStepResult::interrupted);
  Record<DatasetInfo>(m, "DatasetInfo", "A demonstration file as nexusd loaded it.")
      .field("episodes", &DatasetInfo::episodes).field("train_episodes", &DatasetInfo::train_episodes)
      .field("valid_episodes", &DatasetInfo::valid_episodes).field("samples", &DatasetInfo::samples)
      .field("state_dim", &DatasetInfo::state_dim).field("action_dim", &DatasetInfo::action_dim)
      .field("layout", &DatasetInfo::layout).field("views", &DatasetInfo::views)
      .field("state_keys", &DatasetInfo::state_keys).field("source_image_size", &DatasetInfo::source_image_size)
      .field("normalized", &DatasetInfo::normalized).field("action_mean", &DatasetInfo::action_mean)
      .field("action_std", &DatasetInfo::action_std).field("state_mean", &DatasetInfo::state_mean)
      .field("state_std", &DatasetInfo::state_std);
  Record<RlOptions>(m, "RlOptions", "An RL job (ppo or grpo) on a built-in task.")
      .field("algorithm", &RlOptions::algorithm).field("task", &RlOptions::task)
      .field("sessions", &RlOptions::sessions).field("horizon", &RlOptions::horizon)
      .field("group_size", &RlOptions::group_size).field("iterations", &RlOptions::iterations)
      .field("max_steps", &RlOptions::max_steps).field("seed", &RlOptions::seed).field("epochs", &RlOptions::epochs)
      .field("minibatch", &RlOptions::minibatch).field("clip", &RlOptions::clip).field("gamma", &RlOptions::gamma)
      .field("gae_lambda", &RlOptions::lambda).field("entropy", &RlOptions::entropy).field("value_lr", &RlOptions::value_lr)
      .field("max_staleness", &RlOptions::max_staleness).field("downweight_stale", &RlOptions::downweight_stale)
      .field("queue_capacity", &RlOptions::queue_capacity).field("demo_dataset", &RlOptions::demo_dataset)
      .field("demo_weight", &RlOptions::demo_weight).field("demo_batch", &RlOptions::demo_batch)
      .field("synchronous", &RlOptions::synchronous);
  Record<RlStatus>(m, "RlStatus", "An RL job's progress: state running, done, failed or stopped.")
      .field("state", &RlStatus::state).field("error", &RlStatus::error).field("iterations", &RlStatus::iterations)
      .field("version", &RlStatus::version).field("first_version", &RlStatus::first_version)
      .field("env_steps", &RlStatus::env_steps).field("episodes", &RlStatus::episodes)
      .field("recent_success", &RlStatus::recent_success).field("recent_return", &RlStatus::recent_return)
      .field("policy_loss", &RlStatus::policy_loss).field("value_loss", &RlStatus::value_loss)
      .field("entropy", &RlStatus::entropy).field("records_dropped", &RlStatus::records_dropped)
      .field("records_downweighted", &RlStatus::records_downweighted).field("seconds", &RlStatus::seconds)
      .field("demo_loss", &RlStatus::demo_loss).field("records_behind", &RlStatus::records_behind)
      .field("engine_steps", &RlStatus::engine_steps).field("interrupted_episodes", &RlStatus::interrupted_episodes)
      .field("split_minibatches", &RlStatus::split_minibatches).field("observation_bytes", &RlStatus::observation_bytes);
  Record<JobSpec>(m, "JobSpec", "A job the daemon runs for you: sft on a loaded dataset, or eval of a version.")
      .field("kind", &JobSpec::kind).field("dataset", &JobSpec::dataset).field("steps", &JobSpec::steps)
      .field("batch", &JobSpec::batch).field("chunk", &JobSpec::chunk).field("task", &JobSpec::task)
      .field("version", &JobSpec::version).field("episodes", &JobSpec::episodes).field("seed", &JobSpec::seed);
  Record<JobInfo>(m, "JobInfo", "A job's state: queued, running, finished, failed or cancelled.")
      .field("id", &JobInfo::id).field("tenant", &JobInfo::tenant).field("kind", &JobInfo::kind)
      .field("state", &JobInfo::state).field("error", &JobInfo::error).field("done", &JobInfo::done)
      .field("total", &JobInfo::total).field("loss", &JobInfo::loss).field("success_rate", &JobInfo::success_rate)
      .field("mean_return", &JobInfo::mean_return).field("version", &JobInfo::version)
      .field("seconds", &JobInfo::seconds);
}

void bind_status_records(py::module_& m) {
  Record<TenantStatus>(m, "TenantStatus", "An attached tenant as the daemon sees it.")
      .field("name", &TenantStatus::name).field("uid", &TenantStatus::uid).field("pid", &TenantStatus::pid)
      .field("session_id", &TenantStatus::session_id).field("segment_bytes", &TenantStatus::segment_bytes)
      .field("requests", &TenantStatus::requests).field("errors", &TenantStatus::errors)
      .field("attached_s", &TenantStatus::attached_s);
  Record<TenantUsage>(m, "TenantUsage", "What a tenant used (compute-seconds, samples, waits).")
      .field("name", &TenantUsage::name).field("train_s", &TenantUsage::train_s)
      .field("infer_s", &TenantUsage::infer_s).field("samples", &TenantUsage::samples)
      .field("steps", &TenantUsage::steps).field("predictions", &TenantUsage::predictions)
      .field("env_steps", &TenantUsage::env_steps).field("train_wait_p50_us", &TenantUsage::train_wait_p50_us)
      .field("train_wait_p99_us", &TenantUsage::train_wait_p99_us)
      .field("infer_wait_p50_us", &TenantUsage::infer_wait_p50_us)
      .field("infer_wait_p99_us", &TenantUsage::infer_wait_p99_us).field("weight", &TenantUsage::weight)
      .field("attached", &TenantUsage::attached).field("adapter", &TenantUsage::adapter);
  Record<DaemonStatus>(m, "DaemonStatus", "nexusd's status, as nexusctl status shows it.")
      .field("daemon_version", &DaemonStatus::daemon_version)
      .field("protocol_version", &DaemonStatus::protocol_version).field("pid", &DaemonStatus::pid)
      .field("uptime_s", &DaemonStatus::uptime_s).field("tenants", &DaemonStatus::tenants)
      .field("message_bytes_copied", &DaemonStatus::message_bytes_copied)
      .field("tensor_bytes_copied", &DaemonStatus::tensor_bytes_copied).field("backbone", &DaemonStatus::backbone)
      .field("model_groups", &DaemonStatus::model_groups).field("model_requests", &DaemonStatus::model_requests)
      .field("model_samples", &DaemonStatus::model_samples).field("usage", &DaemonStatus::usage)
      .field("usage_wall_s", &DaemonStatus::usage_wall_s).field("training_busy_s", &DaemonStatus::training_busy_s)
      .field("inference_busy_s", &DaemonStatus::inference_busy_s)
      .field("environment_busy_s", &DaemonStatus::environment_busy_s).field("jobs", &DaemonStatus::jobs)
      .field("inference_queued", &DaemonStatus::inference_queued)
      .field("training_queued", &DaemonStatus::training_queued).field("slots_resident", &DaemonStatus::slots_resident)
      .field("slots_evicted", &DaemonStatus::slots_evicted).field("env_sessions", &DaemonStatus::env_sessions)
      .field("dataset_bytes", &DaemonStatus::dataset_bytes).field("rerun_groups", &DaemonStatus::rerun_groups)
      .field("split_steps", &DaemonStatus::split_steps)
      .field("longest_training_turn_s", &DaemonStatus::longest_training_turn_s)
      .field("longest_shared_training_turn_s", &DaemonStatus::longest_shared_training_turn_s)
      .field("health_restarts", &DaemonStatus::health_restarts).field("health", &DaemonStatus::health);
}

}  // namespace

void bind_records(py::module_& m) {
  bind_model_records(m);
  bind_env_records(m);  // JobInfo before DaemonStatus, whose jobs field holds them
  bind_status_records(m);
}

}  // namespace nexus::python
