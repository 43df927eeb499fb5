// Identities and checkpoints that survive restarts, with two real Unix users: a tenant name stays
// bound to its user across a daemon restart; the other user can neither attach as it, read its
// checkpoint files, nor load its checkpoints; the owner resumes after the restart, its loss
// continuing where it was. A name can be released (root or its owner) and then reaches none of
// the old owner's files.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "nexus/status.hpp"
#include "processes.hpp"
#include "tenant_run.hpp"

using namespace nexus::test;

TEST_CASE("a tenant's name and checkpoints are its user's alone, before and after a restart",
          "[integration][model][identity]") {
  const auto alice = ensure_test_user("nexus-test-alice");
  const auto mallory = ensure_test_user("nexus-test-mallory");
  if (!alice || !mallory) FAIL("this test needs root to create users; run the suite as root");
  TempDir dir;
  const std::string sft = executable_copy(NEXUS_TEST_SFT_TENANT, dir), ctl = executable_copy(nexusctl_path(), dir);
  const std::string cat = "/bin/cat";
  const std::string state = dir.path + "/state";
  auto as = [&](const TestUser& u, std::vector<std::string> argv, const std::string& tag) {
    const pid_t p = spawn(argv, {.stdout_path = dir.path + "/" + tag + ".out", .stderr_path = dir.path + "/" + tag + ".err",
                                 .uid = u.uid, .gid = u.gid});
    const int rc = wait_exit(p, std::chrono::seconds(120)).value_or(-1);
    return std::pair{rc, nlohmann::json::parse(last_line(dir.path + "/" + tag + ".out"), nullptr, false)};
  };
  auto daemon = std::make_unique<Daemon>(std::vector<std::string>{"--state-dir", state, "--log-level", "warn"});
  const auto [trc, trained] = as(*alice, {sft, "-s", daemon->socket(), "-t", "alice", "--steps", "30", "--save-every", "30",
                                          "--save-tag", "t1", "--report-every", "0"}, "train");
  INFO(read_file(dir.path + "/train.err"));
  REQUIRE(trc == 0);
  const auto file = std::filesystem::path(state) / "tenants" / std::to_string(alice->uid) / "alice" / "checkpoints" / "t1.safetensors";
  REQUIRE(std::filesystem::exists(file));
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(::stat(file.parent_path().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);

  auto mallory_tries = [&](const std::string& when) {
    INFO(when);
    // Attach as alice: the name is bound to alice's uid.
    const auto [arc, attach] = as(*mallory, {sft, "-s", daemon->socket(), "-t", "alice", "--steps", "1"}, "m-attach-" + when);
    CHECK(arc == 2);
    CHECK(attach["error"] == "PermissionDenied");
    // Load alice's checkpoint under a name of her own: not there (her directory is her own).
    const auto [lrc, load] = as(*mallory, {sft, "-s", daemon->socket(), "-t", "mallory", "--resume", "t1", "--steps", "1"},
                                "m-load-" + when);
    CHECK(lrc == 2);
    CHECK(load["error"] == "BadMessage");
    // Read the file itself: the daemon's private directory.
    const auto [crc, unused] = as(*mallory, {cat, file.string()}, "m-cat-" + when);
    CHECK(crc != 0);
    CHECK_THAT(read_file(dir.path + "/m-cat-" + when + ".err"), Catch::Contains("Permission denied"));
  };
  mallory_tries("same-life");

  daemon->kill9();  // a crash, not a clean stop
  daemon = std::make_unique<Daemon>(std::vector<std::string>{"--state-dir", state, "--log-level", "warn"});
  mallory_tries("after-restart");

  const auto [rrc, resumed] = as(*alice, {sft, "-s", daemon->socket(), "-t", "alice", "--resume", "t1", "--steps", "10",
                                          "--report-every", "0"}, "resume");
  INFO(read_file(dir.path + "/resume.err"));
  REQUIRE(rrc == 0);
  CHECK(resumed["resumed_step"] == 30);
  // Its loss continues from there, not from a fresh head's.
  CHECK(resumed["first_loss"].get<double>() < trained["first_loss"].get<double>() / 2);

  // Released (by its owner here; root may too), the name can go to mallory, who still reaches
  // none of alice's checkpoints.
  const auto [rel_rc, rel] = as(*alice, {ctl, "-s", daemon->socket(), "tenant", "release", "alice"}, "release");
  INFO(read_file(dir.path + "/release.err"));
  CHECK(rel_rc == 0);
  const auto [nrc, now_mallory] = as(*mallory, {sft, "-s", daemon->socket(), "-t", "alice", "--resume", "t1", "--steps", "1"},
                                     "m-after-release");
  CHECK(nrc == 2);
  CHECK(now_mallory["error"] == "BadMessage");  // attached as alice now, but t1 is not hers
}
