#include "daemon/metrics/prometheus.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

namespace nexus::metrics {
namespace {

// Tenant names are [A-Za-z0-9._-] (the registry refuses others); label values are escaped
// anyway, as the format asks: backslash, double quote and newline.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

class Writer {
 public:
  void family(const char* name, const char* type, const char* help) {
    os_ << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  }
  void sample(const std::string& name, const std::string& labels, double value) {
    os_ << name;
    if (!labels.empty()) os_ << '{' << labels << '}';
    char buf[64];
    std::snprintf(buf, sizeof buf, " %.9g\n", value);
    os_ << buf;
  }
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
};

}  // namespace

std::string render_prometheus(const DaemonFacts& f, const daemon::ServiceStatus* s) {
  Writer w;
  w.family("nexus_uptime_seconds", "gauge", "Seconds since nexusd started.");
  w.sample("nexus_uptime_seconds", "", f.uptime_s);
  w.family("nexus_tenants_attached", "gauge", "Tenants attached now.");
  w.sample("nexus_tenants_attached", "", static_cast<double>(f.tenants_attached));
  w.family("nexus_message_bytes_copied_total", "counter", "Request bytes copied out of tenants' rings.");
  w.sample("nexus_message_bytes_copied_total", "", static_cast<double>(f.message_bytes_copied));
  if (!s) return w.str();

  const auto& u = s->usage;
  w.family("nexus_backbone_passes_total", "counter", "Group backbone forward passes.");
  w.sample("nexus_backbone_passes_total", "", static_cast<double>(s->groups));
  w.family("nexus_model_requests_total", "counter", "SFT and predict requests served by group passes.");
  w.sample("nexus_model_requests_total", "", static_cast<double>(s->requests));
  w.family("nexus_model_samples_total", "counter", "Samples through the backbone.");
  w.sample("nexus_model_samples_total", "", static_cast<double>(s->samples));
  w.family("nexus_group_reruns_total", "counter", "Group passes that failed and were re-run member by member.");
  w.sample("nexus_group_reruns_total", "", static_cast<double>(s->rerun_groups));
  w.family("nexus_queue_depth", "gauge", "Requests waiting in the model service's queues.");
  w.sample("nexus_queue_depth", "queue=\"inference\"", static_cast<double>(s->inference_queued));
  w.sample("nexus_queue_depth", "queue=\"training\"", static_cast<double>(s->training_queued));
  w.family("nexus_slots", "gauge", "Tenant slots, resident in memory or evicted to their checkpoint.");
  w.sample("nexus_slots", "state=\"resident\"", static_cast<double>(s->slots_resident));
  w.sample("nexus_slots", "state=\"evicted\"", static_cast<double>(s->slots_evicted));
  // Where each executor lane's time goes: `nexus-bench workload --profile`.
  w.family("nexus_executor_seconds_total", "counter",
           "Executor time per replica and lane (serving both queues, inference or training): its turns, and within them backbone, copy "
           "(packing inputs, results out), heads (forward, backward, RL updates, slot operations), optimizer steps, lease (waiting for "
           "a tenant's slot that another lane's turn held), narrow (turns run on fewer intra-op threads than the cap, beside other lanes' "
           "passes).");
  for (std::size_t i = 0; i < s->replicas.size(); ++i) {
    const auto& r = s->replicas[i];
    for (std::size_t k = 0; k < r.lanes.size(); ++k) {
      const auto& l = r.lanes[k];
      const std::string lane = "replica=\"" + std::to_string(i) + "\",lane=\"" + std::to_string(k) + "\",serves=\"" +
                               l.serves + "\",device=\"" + label(r.device) + "\",part=\"";
      const std::pair<const char*, double> parts[] = {{"turns", l.turns_s},     {"backbone", l.backbone_s},
                                                      {"copy", l.copy_s},       {"heads", l.heads_s},
                                                      {"optimizer", l.optimizer_s}, {"lease", l.lease_s},
                                                      {"narrow", l.narrow_s}};
      for (const auto& [part, seconds] : parts) w.sample("nexus_executor_seconds_total", lane + part + "\"", seconds);
    }
  }
  const auto& fc = s->feature_cache;
  w.family("nexus_feature_cache_lookups_total", "counter",
           "Frozen-feature cache lookups of dataset SFT samples, by result (a disk hit is also a hit).");
  w.sample("nexus_feature_cache_lookups_total", "result=\"hit\"", static_cast<double>(fc.hits));
  w.sample("nexus_feature_cache_lookups_total", "result=\"miss\"", static_cast<double>(fc.misses));
  w.sample("nexus_feature_cache_lookups_total", "result=\"disk_hit\"", static_cast<double>(fc.disk_hits));
  w.family("nexus_feature_cache_evictions_total", "counter", "Entries the feature cache's bounds pushed out of memory.");
  w.sample("nexus_feature_cache_evictions_total", "", static_cast<double>(fc.evictions));
  w.family("nexus_feature_cache_bytes", "gauge", "Bytes the feature cache holds, by tier, and its memory bound.");
  w.sample("nexus_feature_cache_bytes", "tier=\"memory\"", static_cast<double>(fc.bytes));
  w.sample("nexus_feature_cache_bytes", "tier=\"disk\"", static_cast<double>(fc.disk_bytes));
  w.sample("nexus_feature_cache_bytes", "tier=\"bound\"", static_cast<double>(fc.bound_bytes));
  w.family("nexus_feature_cache_entries", "gauge", "Samples' features the cache holds, by tier.");
  w.sample("nexus_feature_cache_entries", "tier=\"memory\"", static_cast<double>(fc.entries));
  w.sample("nexus_feature_cache_entries", "tier=\"disk\"", static_cast<double>(fc.disk_entries));
  w.family("nexus_env_sessions", "gauge", "Open simulator sessions.");
  w.sample("nexus_env_sessions", "", static_cast<double>(s->env_sessions));
  w.family("nexus_dataset_bytes", "gauge", "Bytes of demonstration datasets held.");
  w.sample("nexus_dataset_bytes", "", static_cast<double>(s->dataset_bytes));

  w.family("nexus_service_busy_seconds_total", "counter", "Time each service spent working.");
  for (int i = 0; i < kServices; ++i)
    w.sample("nexus_service_busy_seconds_total", std::string("service=\"") + service_name(static_cast<Service>(i)) + "\"",
             u.busy_s[i]);
  w.family("nexus_service_utilization", "gauge", "Busy time over wall time since the start, per service.");
  for (int i = 0; i < kServices; ++i)
    w.sample("nexus_service_utilization", std::string("service=\"") + service_name(static_cast<Service>(i)) + "\"",
             u.wall_s > 0 ? u.busy_s[i] / u.wall_s : 0);

  w.family("nexus_tenant_compute_seconds_total", "counter",
           "Compute-seconds charged to a tenant: its share of group passes plus its own head and optimizer time.");
  for (const auto& [name, t] : u.tenants) {
    w.sample("nexus_tenant_compute_seconds_total", "tenant=\"" + label(name) + "\",queue=\"training\"", t.train_s);
    w.sample("nexus_tenant_compute_seconds_total", "tenant=\"" + label(name) + "\",queue=\"inference\"", t.infer_s);
  }
  const std::pair<const char*, std::uint64_t TenantUsage::*> counters[] = {
      {"nexus_tenant_samples_total", &TenantUsage::samples}, {"nexus_tenant_steps_total", &TenantUsage::steps},
      {"nexus_tenant_predictions_total", &TenantUsage::predictions},
      {"nexus_tenant_env_steps_total", &TenantUsage::env_steps}};
  for (const auto& [metric, field] : counters) {
    w.family(metric, "counter", "Per-tenant count (samples, optimizer steps, predictions, environment steps).");
    for (const auto& [name, t] : u.tenants) w.sample(metric, "tenant=\"" + label(name) + "\"", static_cast<double>(t.*field));
  }
  w.family("nexus_tenant_queue_wait_seconds", "summary", "Queue wait of a tenant's recent requests.");
  for (const auto& [queue, waits] : {std::pair{"training", &u.train_wait}, std::pair{"inference", &u.infer_wait}})
    for (const auto& [name, ws] : *waits) {
      const auto base = "tenant=\"" + label(name) + "\",queue=\"" + queue + "\"";
      w.sample("nexus_tenant_queue_wait_seconds", base + ",quantile=\"0.5\"", ws.p50_us / 1e6);
      w.sample("nexus_tenant_queue_wait_seconds", base + ",quantile=\"0.99\"", ws.p99_us / 1e6);
      w.sample("nexus_tenant_queue_wait_seconds_sum", base, ws.sum_us / 1e6);
      w.sample("nexus_tenant_queue_wait_seconds_count", base, static_cast<double>(ws.count));
    }
  std::map<std::string, int> states;
  for (const auto& j : s->jobs) ++states[job_state_name(j.state)];
  w.family("nexus_jobs", "gauge", "Jobs by state (finished ones are kept for a while).");
  for (const char* st : {"queued", "running", "finished", "failed", "cancelled"})
    w.sample("nexus_jobs", std::string("state=\"") + st + "\"", states[st]);
  return w.str();
}

std::string write_textfile(const std::string& path, const std::string& text) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  std::uint64_t nonce = 0;
  if (::getrandom(&nonce, sizeof nonce, 0) != sizeof nonce) return std::string("getrandom: ") + std::strerror(errno);
  char suffix[24];
  std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(nonce));
  const std::string tmp = dir + "/." + base + ".tmp." + suffix;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0) return tmp + ": " + std::strerror(errno);
  std::string error;
  if (::fchmod(fd, 0640) != 0) error = std::string("fchmod: ") + std::strerror(errno);  // whatever the umask
  for (std::size_t done = 0; error.empty() && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) error = std::string("write: ") + std::strerror(n < 0 ? errno : EIO);
    else done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0 && error.empty()) error = std::string("close: ") + std::strerror(errno);
  // rename() replaces whatever `path` names (a symlink included) without following it.
  if (error.empty() && std::rename(tmp.c_str(), path.c_str()) != 0) error = path + ": " + std::strerror(errno);
  if (!error.empty()) ::unlink(tmp.c_str());
  return error;
}

}  // namespace nexus::metrics
