#include <catch2/catch.hpp>

#include <fstream>

#include "daemon/config/config.hpp"
#include "processes.hpp"

using nexus::daemon::load_config_file;

TEST_CASE("the shipped nexusd.toml parses and says what the defaults are", "[config]") {
  const auto c = load_config_file(std::string(NEXUS_SOURCE_DIR) + "/systemd/nexusd.toml");
  const nexus::daemon::DaemonConfig defaults;
  CHECK(c.socket_path == defaults.socket_path);
  CHECK(c.spin == defaults.spin);
  CHECK(c.backbone == "tiny");
  CHECK(c.batch_samples == defaults.batch_samples);
  CHECK(c.batch_wait == defaults.batch_wait);
  CHECK(c.state_dir == defaults.state_dir);
  CHECK(c.deterministic == defaults.deterministic);
  CHECK(c.external_envs.empty());
  // Every bound the file documents is the default it states.
  CHECK(c.max_tenants_per_uid == defaults.max_tenants_per_uid);
  CHECK(c.max_in_flight == defaults.max_in_flight);
  CHECK(c.request_bytes_per_tenant == defaults.request_bytes_per_tenant);
  CHECK(c.group_window_ms == defaults.group_window_ms);
  CHECK(c.max_request_gflop == defaults.max_request_gflop);
  CHECK(c.versions_kept == defaults.versions_kept);
  CHECK(c.idle_evict == defaults.idle_evict);
  CHECK(c.external_step_timeout == defaults.external_step_timeout);
  CHECK(c.external_step_per_session == defaults.external_step_per_session);
  CHECK(c.dataset_bytes_per_tenant == defaults.dataset_bytes_per_tenant);
  CHECK(c.dataset_bytes_total == defaults.dataset_bytes_total);
  CHECK(c.jobs_running == defaults.jobs_running);
  CHECK(c.rl_observation_bytes_per_uid == defaults.rl_observation_bytes_per_uid);
  CHECK(c.metrics_interval == defaults.metrics_interval);
  CHECK(c.tenants.empty());
  CHECK(c.devices == defaults.devices);
  CHECK(c.allow_device_regions == defaults.allow_device_regions);
  CHECK(c.inference_lanes == defaults.inference_lanes);
  CHECK(c.training_lanes == defaults.training_lanes);
  CHECK(c.torch_threads == defaults.torch_threads);
  CHECK(c.precision == defaults.precision);
  CHECK(c.precision == "float32");
}

TEST_CASE("the backbone's precision is float32 tf32 or bf16 and anything else is named", "[config]") {
  nexus::test::TempDir dir;
  const std::string path = dir.path + "/c.toml";
  for (const char* ok : {"float32", "tf32", "bf16"}) {
    std::ofstream(path) << "[model]\nprecision = \"" << ok << "\"\n";
    CHECK(load_config_file(path).precision == ok);
  }
  for (const char* bad : {"\"fp16\"", "\"BF16\"", "\"\"", "16", "true"}) {
    std::ofstream(path) << "[model]\nprecision = " << bad << "\n";
    CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("model.precision"));
  }
}

TEST_CASE("devices, replica pins and regions come from the config, bad ones named", "[config]") {
  nexus::test::TempDir dir;
  const std::string path = dir.path + "/c.toml";
  std::ofstream(path) << "[model]\ndevices = [\"cpu\", \"cpu\"]\n[ipc]\nallow_device_regions = true\n"
                         "[tenants.alice]\nreplica = 1\n";
  const auto c = load_config_file(path);
  CHECK(c.devices == std::vector<std::string>{"cpu", "cpu"});
  CHECK(c.allow_device_regions);
  CHECK(c.tenants.at("alice").replica == 1);
  CHECK(c.tenants.at("alice").weight == 1.0);
  std::ofstream(path) << "[model]\ndevices = []\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("model.devices"));
  std::ofstream(path) << "[model]\ndevices = [\"cpu\", 1]\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("model.devices must hold only strings"));
  std::ofstream(path) << "[model]\ndevices = [\"cpu\"]\n[tenants.alice]\nreplica = 1\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("tenants.alice.replica"));
  // Unset devices (every visible CUDA device, else the CPU) are counted at start, not here.
  std::ofstream(path) << "[tenants.alice]\nreplica = 1\n";
  CHECK(load_config_file(path).tenants.at("alice").replica == 1);
  CHECK(load_config_file(path).devices.empty());
  std::ofstream(path) << "[ipc]\nallow_device_regions = 1\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("ipc.allow_device_regions"));
}

TEST_CASE("tenant weights, priorities and bounds come from the config, bad ones named", "[config]") {
  nexus::test::TempDir dir;
  const std::string path = dir.path + "/c.toml";
  std::ofstream(path) << "[tenants.alice]\nweight = 2.5\npriority = 1\n[tenants.bob]\nweight = 1\n"
                         "[model]\nversions_kept = 3\nidle_evict_s = 30\nmax_request_gflop = 12.5\n"
                         "[env]\nexternal_step_timeout_ms = 1500\nexternal_step_per_session_ms = 0\ndataset_mib_total = 100\n"
                         "[jobs]\nrl_observation_mib_per_uid = 3\n"
                         "[metrics]\ntextfile = \"/tmp/n.prom\"\ninterval_s = 5\n";
  const auto c = load_config_file(path);
  CHECK(c.tenants.at("alice").weight == 2.5);
  CHECK(c.tenants.at("alice").priority == 1);
  CHECK(c.tenants.at("bob").weight == 1.0);
  CHECK(c.versions_kept == 3);
  CHECK(c.idle_evict.count() == 30);
  CHECK(c.max_request_gflop == 12.5);
  CHECK(c.external_step_timeout.count() == 1500);
  CHECK(c.external_step_per_session.count() == 0);  // 0: the exchange's deadline is the step timeout alone
  CHECK(c.dataset_bytes_total == 100ull << 20);
  CHECK(c.rl_observation_bytes_per_uid == 3ull << 20);
  CHECK(c.metrics_textfile == "/tmp/n.prom");
  CHECK(c.metrics_interval.count() == 5);
  std::ofstream(path) << "[tenants.alice]\nweight = 0\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("tenants.alice.weight"));
  std::ofstream(path) << "[model]\nversions_kept = \"many\"\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("model.versions_kept"));
  std::ofstream(path) << "[env]\nexternal_step_timeout_ms = 0\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("env.external_step_timeout_ms"));
  std::ofstream(path) << "[env]\nexternal_step_per_session_ms = -5\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("env.external_step_per_session_ms"));
  // A size so large that MiB -> bytes would wrap (into a tiny or zero bound) is refused.
  std::ofstream(path) << "[jobs]\nrl_observation_mib_per_uid = 17592186044416\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("jobs.rl_observation_mib_per_uid must be at most"));
  std::ofstream(path) << "[model]\ncheckpoint_mib_per_uid = 0\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("model.checkpoint_mib_per_uid must be > 0"));
}

TEST_CASE("config values override defaults, bad ones are refused with the key named", "[config]") {
  nexus::test::TempDir dir;
  const std::string path = dir.path + "/c.toml";
  std::ofstream(path) << "[daemon]\nsocket = \"/tmp/x.sock\"\nspin_us = 0\nmax_tenants = 3\n"
                         "[model]\nbackbone = \"small\"\nbatch_samples = 8\nbatch_wait_us = 500\nstate_dir = \"/srv/n\"\n"
                         "deterministic = true\n[env.external]\nmysim = \"/run/nexus/mysim.sock\"\n";
  const auto c = load_config_file(path);
  CHECK(c.socket_path == "/tmp/x.sock");
  CHECK(c.spin.count() == 0);
  CHECK(c.max_tenants == 3);
  CHECK(c.backbone == "small");
  CHECK(c.batch_samples == 8);
  CHECK(c.batch_wait.count() == 500);
  CHECK(c.state_dir == "/srv/n");
  CHECK(c.deterministic);
  CHECK(c.external_envs == std::map<std::string, std::string>{{"mysim", "/run/nexus/mysim.sock"}});
  std::ofstream(path) << "[env.external]\nmysim = 3\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("env.external.mysim"));
  std::ofstream(path) << "[model]\ndeterministic = \"yes\"\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("model.deterministic"));
  std::ofstream(path) << "[model]\ninference_lanes = 3\ntraining_lanes = 0\ntorch_threads = 1\n";
  CHECK(load_config_file(path).inference_lanes == 3);
  CHECK(load_config_file(path).training_lanes == 0);
  CHECK(load_config_file(path).torch_threads == 1);
  for (const char* bad : {"0", "9", "-1", "\"two\""}) {
    std::ofstream(path) << "[model]\ninference_lanes = " << bad << "\n";
    CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("model.inference_lanes"));
  }
  std::ofstream(path) << "[model]\ntraining_lanes = 2\n";
  CHECK(load_config_file(path).training_lanes == 2);
  for (const char* bad : {"5", "-1", "\"one\""}) {
    std::ofstream(path) << "[model]\ntraining_lanes = " << bad << "\n";
    CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("model.training_lanes"));
  }
  std::ofstream(path) << "[daemon]\nmax_tenants = -1\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("max_tenants"));
  std::ofstream(path) << "[daemon\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains(path));
}
