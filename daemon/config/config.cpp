#include "daemon/config/config.hpp"

#include <stdexcept>
#include <toml++/toml.h>

namespace nexus::daemon {

DaemonConfig load_config_file(const std::string& path, DaemonConfig c) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error("config " + path + ": " + std::string(e.description()));
  }
  const auto d = t["daemon"];
  auto positive = [&](const char* key, std::int64_t v) {
    if (v <= 0) throw std::runtime_error("config " + path + ": daemon." + key + " must be > 0");
    return v;
  };
  if (auto v = d["socket"].value<std::string>()) c.socket_path = *v;
  if (auto v = d["max_tenants"].value<std::int64_t>())
    c.max_tenants = static_cast<std::uint32_t>(positive("max_tenants", *v));
  if (auto v = d["max_segment_mib"].value<std::int64_t>())
    c.max_segment_bytes = static_cast<std::uint64_t>(positive("max_segment_mib", *v)) << 20;
  if (auto v = d["spin_us"].value<std::int64_t>()) {
    if (*v < 0) throw std::runtime_error("config " + path + ": daemon.spin_us must be >= 0");
    c.spin = std::chrono::microseconds(*v);
  }
  if (auto v = d["log_level"].value<std::string>()) c.log_level = *v;
  const auto m = t["model"];
  if (auto v = m["backbone"].value<std::string>()) c.backbone = *v;
  if (auto v = m["weights"].value<std::string>()) c.weights = *v;
  if (auto v = m["state_dir"].value<std::string>()) c.state_dir = *v;
  if (auto v = m["batch_samples"].value<std::int64_t>())
    c.batch_samples = static_cast<std::uint32_t>(positive("batch_samples", *v));
  if (auto v = m["batch_wait_us"].value<std::int64_t>()) {
    if (*v < 0) throw std::runtime_error("config " + path + ": model.batch_wait_us must be >= 0");
    c.batch_wait = std::chrono::microseconds(*v);
  }
  if (const auto n = m["deterministic"]) {
    const auto v = n.value<bool>();
    if (!v || !n.is_boolean()) throw std::runtime_error("config " + path + ": model.deterministic must be true or false");
    c.deterministic = *v;
  }
  if (const auto* ext = t["env"]["external"].as_table()) {
    for (const auto& [name, value] : *ext) {
      const auto p = value.value<std::string>();
      if (!p || p->empty() || name.str().find(':') != std::string_view::npos)
        throw std::runtime_error("config " + path + ": env.external." + std::string(name.str()) +
                                 " must be a socket path (and the name must not contain ':')");
      c.external_envs[std::string(name.str())] = *p;
    }
  }
  return c;
}

}  // namespace nexus::daemon
