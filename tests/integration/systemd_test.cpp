// nexusd under systemd, without needing systemd to run the tests: the unit files pass
// `systemd-analyze verify`; the daemon tells a NOTIFY_SOCKET it is ready and keeps the watchdog
// fed; systemd-socket-activate (systemd's own tool) starts it on the first connection and it
// serves through the passed socket; the metrics textfile works under the unit's hardening.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "nexus/client.hpp"
#include "processes.hpp"

using namespace nexus::test;

TEST_CASE("the unit files pass systemd-analyze verify", "[integration][systemd]") {
  TempDir dir;
  std::string service = read_file(std::string(NEXUS_TEST_UNIT_DIR) + "/nexusd.service");
  REQUIRE_THAT(service, Catch::Contains("Type=notify") && Catch::Contains("WatchdogSec="));
  // The unit names the installed binary; verify checks it is executable, so point it at ours.
  service = std::regex_replace(service, std::regex("ExecStart=\\S+"), "ExecStart=" + nexusd_path());
  std::ofstream(dir.path + "/nexusd.service") << service;
  std::filesystem::copy_file(std::string(NEXUS_TEST_SOURCE_DIR) + "/systemd/nexusd.socket", dir.path + "/nexusd.socket");
  const pid_t v = spawn({"/usr/bin/systemd-analyze", "verify", "--man=no", dir.path + "/nexusd.service",
                         dir.path + "/nexusd.socket"},
                        {.stdout_path = dir.path + "/out", .stderr_path = dir.path + "/err"});
  INFO(read_file(dir.path + "/err"));
  CHECK(wait_exit(v, std::chrono::seconds(60)) == 0);
  CHECK(read_file(dir.path + "/err").empty());  // no warnings either (unknown keys only warn)
}

namespace {

// An optional unit of systemd/ (not enabled by the package): its ExecStart= program is not on
// this machine (an NVIDIA driver, a site's venv) and verify checks it is executable, so `program`
// is replaced by /bin/true. Verify must pass with no warning either (unknown keys only warn).
void verify_optional_unit(const std::string& name, const std::string& program) {
  TempDir dir;
  const std::string unit = read_file(std::string(NEXUS_TEST_SOURCE_DIR) + "/systemd/" + name);
  REQUIRE_THAT(unit, Catch::Contains(program) && Catch::Contains("User=nexus"));
  std::ofstream(dir.path + "/" + name) << std::regex_replace(unit, std::regex(program), "/bin/true");
  const pid_t v = spawn({"/usr/bin/systemd-analyze", "verify", "--man=no", dir.path + "/" + name},
                        {.stdout_path = dir.path + "/out", .stderr_path = dir.path + "/err"});
  INFO(read_file(dir.path + "/err"));
  CHECK(wait_exit(v, std::chrono::seconds(60)) == 0);
  CHECK(read_file(dir.path + "/err").empty());
}

}  // namespace

TEST_CASE("the optional MPS unit passes systemd-analyze verify, as the nexus user", "[integration][systemd]") {
  REQUIRE_THAT(read_file(std::string(NEXUS_TEST_SOURCE_DIR) + "/systemd/nvidia-mps.service"),
               Catch::Contains("CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps"));
  verify_optional_unit("nvidia-mps.service", "/usr/bin/nvidia-cuda-mps-control");
}

TEST_CASE("the optional Meta-World engine unit passes systemd-analyze verify, as the nexus user",
          "[integration][systemd]") {
  REQUIRE_THAT(read_file(std::string(NEXUS_TEST_SOURCE_DIR) + "/systemd/nexus-metaworld.service"),
               Catch::Contains("-m nexus.metaworld serve") && Catch::Contains("--mode 660"));
  verify_optional_unit("nexus-metaworld.service", "/usr/lib/nexus/sim-venv/bin/python");
}

TEST_CASE("the rollout engine template unit passes systemd-analyze verify for an instance, as the nexus user",
          "[integration][systemd][rollout]") {
  TempDir dir;
  std::string unit = read_file(std::string(NEXUS_TEST_UNIT_DIR) + "/nexus-rollout@.service");
  REQUIRE_THAT(unit, Catch::Contains("/nexus-rollout --socket /run/nexus/rollout.sock --name %i") &&
                         Catch::Contains("User=nexus") && Catch::Contains("Restart=on-failure"));
  // The installed binary is not on this machine; verify checks ExecStart= is executable.
  std::ofstream(dir.path + "/nexus-rollout@.service") << std::regex_replace(unit, std::regex("ExecStart=\\S+"),
                                                                            "ExecStart=/bin/true");
  std::filesystem::create_symlink("nexus-rollout@.service", dir.path + "/nexus-rollout@1.service");
  const pid_t v = spawn({"/usr/bin/systemd-analyze", "verify", "--man=no", dir.path + "/nexus-rollout@1.service"},
                        {.stdout_path = dir.path + "/out", .stderr_path = dir.path + "/err"});
  INFO(read_file(dir.path + "/err"));
  CHECK(wait_exit(v, std::chrono::seconds(60)) == 0);
  CHECK(read_file(dir.path + "/err").empty());  // no warnings either (unknown keys only warn)
}

TEST_CASE("nexusd reports READY=1 to NOTIFY_SOCKET and feeds the watchdog", "[integration][systemd]") {
  TempDir dir;
  const std::string path = dir.path + "/notify.sock";
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strcpy(a.sun_path, path.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  const pid_t d = spawn({nexusd_path(), "--socket", dir.path + "/n.sock", "--state-dir", dir.path + "/state",
                         "--backbone", "none"},
                        {.stderr_path = dir.path + "/log", .env = {{"NOTIFY_SOCKET", path}, {"WATCHDOG_USEC", "400000"}}});
  bool ready = false;
  int watchdogs = 0;
  // Watchdogs are counted for 3 s from READY=1, not from the spawn: under a loaded CI machine
  // the start alone (loading LibTorch) can take most of a fixed window.
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < end) {
    timeval tv{0, 100000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[512];
    const ssize_t n = ::recv(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) continue;
    buf[n] = 0;
    if (!ready && std::strstr(buf, "READY=1")) {
      ready = true;
      end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    }
    if (ready && std::strstr(buf, "WATCHDOG=1")) ++watchdogs;
  }
  ::close(fd);
  ::kill(d, SIGTERM);
  INFO(read_file(dir.path + "/log"));
  CHECK(wait_exit(d, std::chrono::seconds(30)) == 0);
  CHECK(ready);
  CHECK(watchdogs >= 4);  // every 200 ms (half of WATCHDOG_USEC) for about 3 s, loosely
}

TEST_CASE("systemd-socket-activate starts nexusd on the first connection, which it serves", "[integration][systemd]") {
  TempDir dir;
  const std::string path = dir.path + "/activated.sock";
  const pid_t act = spawn({"/usr/bin/systemd-socket-activate", "-l", path, nexusd_path(), "--backbone", "none",
                           "--state-dir", dir.path + "/state", "--log-level", "info"},
                          {.stdout_path = dir.path + "/log", .stderr_path = dir.path + "/log"});
  // The activator binds the path before it listens: a connect in between is refused (CI hit
  // that window under load). A refused connect starts nothing, so the first one accepted is
  // the first connection, and it starts nexusd.
  std::unique_ptr<nexus::Client> client;
  REQUIRE(eventually(
      [&] {
        try {
          client = nexus::Client::attach({.socket_path = path, .tenant = "on-demand"});
          return true;
        } catch (const nexus::Error& e) {
          if (e.code() != nexus::ErrorCode::ConnectFailed) throw;
          return false;
        }
      },
      std::chrono::seconds(10)));
  const std::vector<std::uint8_t> p = {4, 5, 6};
  CHECK(client->ping(p) == p);
  client.reset();
  ::kill(act, SIGTERM);  // the activator exec'd nexusd: this is nexusd
  INFO(read_file(dir.path + "/log"));
  CHECK(wait_exit(act, std::chrono::seconds(30)) == 0);
  CHECK_THAT(read_file(dir.path + "/log"), Catch::Contains("systemd=true"));
}

TEST_CASE("the metrics textfile is written 0640 with its directory's group, whatever the umask, and never "
          "through a planted symlink",
          "[integration][systemd][metrics]") {
  TempDir dir;
  const std::string metrics = dir.path + "/nexus-metrics";
  // As the package makes it (tmpfiles.d: 2750), with the node exporter's group standing in.
  std::filesystem::create_directory(metrics);
  const gid_t exporter = 65534;  // nogroup
  REQUIRE(::chown(metrics.c_str(), ::geteuid(), exporter) == 0);
  REQUIRE(::chmod(metrics.c_str(), 02750) == 0);
  std::ofstream(dir.path + "/nexusd.toml") << "[metrics]\ntextfile = \"" << metrics << "/nexusd.prom\"\ninterval_s = 1\n";
  const mode_t old = ::umask(077);  // the unit's UMask
  Daemon d({"--config", dir.path + "/nexusd.toml", "--backbone", "none"});
  ::umask(old);
  const std::string file = metrics + "/nexusd.prom";
  REQUIRE(eventually([&] { return std::filesystem::exists(file); }));
  struct stat st {};
  REQUIRE(::lstat(file.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
  CHECK(st.st_gid == exporter);
  CHECK_THAT(read_file(file), Catch::Contains("nexus_uptime_seconds"));
  // Someone who can write the directory plants a symlink where the file goes: the next write
  // replaces the link, never writes through it.
  std::ofstream(dir.path + "/target") << "untouched";
  std::filesystem::remove(file);
  std::filesystem::create_symlink(dir.path + "/target", file);
  REQUIRE(eventually([&] {
    struct stat now {};
    return ::lstat(file.c_str(), &now) == 0 && S_ISREG(now.st_mode);
  }));
  CHECK(read_file(dir.path + "/target") == "untouched");
  for (const auto& e : std::filesystem::directory_iterator(metrics))  // no temporary left behind
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("the unit may write the metrics directory the package makes", "[integration][systemd][metrics]") {
  const auto service = read_file(std::string(NEXUS_TEST_UNIT_DIR) + "/nexusd.service");
  CHECK_THAT(service, Catch::Contains("ProtectSystem=strict") && Catch::Contains("ReadWritePaths=-/var/lib/nexus-metrics"));
  const auto tmpfiles = read_file(std::string(NEXUS_TEST_SOURCE_DIR) + "/systemd/tmpfiles.d/nexus.conf");
  CHECK_THAT(tmpfiles, Catch::Contains("d /var/lib/nexus-metrics 2750 nexus nexus"));
  CHECK_THAT(read_file(std::string(NEXUS_TEST_SOURCE_DIR) + "/systemd/nexusd.toml"),
             Catch::Contains("/var/lib/nexus-metrics/nexusd.prom"));
}
