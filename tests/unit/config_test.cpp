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
  std::ofstream(path) << "[daemon]\nmax_tenants = -1\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains("max_tenants"));
  std::ofstream(path) << "[daemon\n";
  CHECK_THROWS_WITH(load_config_file(path), Catch::Contains(path));
}
