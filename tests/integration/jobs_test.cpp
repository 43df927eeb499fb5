// Jobs and the administrator's views, through real processes: an SFT job on a loaded dataset and
// an evaluation job run in nexusd and report progress; cancel works for the owner and root and
// for nobody else; nexusctl jobs/usage/metrics/top say what happened (metrics parse with a
// Prometheus parser; top fits an 80x24 terminal, read back from tmux).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "error_code.hpp"
#include "processes.hpp"
#include "tenant_run.hpp"

using namespace nexus::test;

namespace {

nexus::JobInfo wait_job(nexus::Client& c, std::uint64_t id, std::chrono::seconds limit) {
  nexus::JobInfo j;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  do {
    j = c.job(id);
    if (j.state != "queued" && j.state != "running") return j;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (std::chrono::steady_clock::now() < deadline);
  return j;
}

}  // namespace

TEST_CASE("SFT and evaluation jobs run in nexusd, report progress, and are cancelled by their owner or root only",
          "[integration][model][jobs]") {
  TempDir dir;
  const std::string file = dir.path + "/reach.hdf5";
  REQUIRE(run_json({nexusctl_path(), "dataset", "record", "--task", "reach", "--episodes", "10", "--out", file}, dir,
                   "record").first == 0);
  Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn", "--state-dir", dir.path + "/state"});
  auto c = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "jobber", .timeout = std::chrono::seconds(60)});
  c->register_tenant({.head = {.kind = "mlp_chunk", .state_dim = 4, .action_dim = 2, .chunk = 4}});
  c->dataset_load("demos", file);
  const auto missing = wait_job(*c, c->job_start({.kind = "sft", .dataset = "missing", .steps = 5}), std::chrono::seconds(30));
  CHECK(missing.state == "failed");
  CHECK(missing.error.find("missing") != std::string::npos);
  CHECK(code_of([&] { c->job_start({.kind = "train"}); }) == nexus::ErrorCode::BadMessage);
  const auto sft = c->job_start({.kind = "sft", .dataset = "demos", .steps = 60, .batch = 16, .chunk = 4});
  const auto done = wait_job(*c, sft, std::chrono::seconds(120));
  INFO(done.state << " " << done.error);
  CHECK(done.state == "finished");
  CHECK(done.done == 60);
  CHECK(done.loss > 0);
  CHECK(c->slot_digest().step == 60);
  // Evaluation never reads the live head: without a published version it fails, with its reason.
  const auto early = wait_job(*c, c->job_start({.kind = "eval", .task = "reach", .episodes = 4}), std::chrono::seconds(60));
  CHECK(early.state == "failed");
  CHECK(early.error.find("publish") != std::string::npos);
  const auto v = c->publish();
  const auto before = c->slot_digest();
  const auto eval = wait_job(*c, c->job_start({.kind = "eval", .task = "reach", .episodes = 6, .seed = 500}),
                             std::chrono::seconds(120));
  CHECK(eval.state == "finished");
  CHECK(eval.done == 6);
  CHECK(eval.version == v);
  CHECK(c->slot_digest().parameters == before.parameters);  // read-only
  // Cancellation: by the owner through its attachment, by root through nexusctl; another
  // tenant sees no such job.
  const auto long_job = c->job_start({.kind = "sft", .dataset = "demos", .steps = 1000000, .batch = 8, .chunk = 4});
  auto other = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "other"});
  CHECK(code_of([&] { other->job(long_job); }) == nexus::ErrorCode::UnknownJob);
  CHECK(code_of([&] { other->job_cancel(long_job); }) == nexus::ErrorCode::UnknownJob);
  const auto [rc, cancelled] = run_json({nexusctl_path(), "-s", daemon.socket(), "cancel", std::to_string(long_job), "--json"},
                                        dir, "cancel");
  CHECK(rc == 0);
  CHECK(wait_job(*c, long_job, std::chrono::seconds(30)).state == "cancelled");
  const auto [jrc, jobs] = run_json({nexusctl_path(), "-s", daemon.socket(), "jobs", "--json"}, dir, "jobs");
  REQUIRE(jrc == 0);
  CHECK(jobs["jobs"].size() == 5);
  if (auto user = ensure_test_user("nexus-jobs-probe")) {  // another Unix user may not cancel it
    const auto again = c->job_start({.kind = "sft", .dataset = "demos", .steps = 1000000, .batch = 8, .chunk = 4});
    const pid_t p = spawn({executable_copy(nexusctl_path(), dir), "-s", daemon.socket(), "cancel", std::to_string(again)},
                          {.stdout_path = dir.path + "/probe.out", .stderr_path = dir.path + "/probe.err",
                           .uid = user->uid, .gid = user->gid});
    CHECK(wait_exit(p, std::chrono::seconds(10)) == 1);
    CHECK_THAT(read_file(dir.path + "/probe.err"), Catch::Contains("UnknownJob"));
    const auto state = c->job(again).state;  // untouched by the refused cancel (queued until its thread runs)
    CHECK((state == "running" || state == "queued"));
    c->job_cancel(again);
  }
}

TEST_CASE("nexusctl usage, metrics and top report the accounting", "[integration][model][accounting]") {
  TempDir dir;
  Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn"});
  const pid_t t = spawn({NEXUS_TEST_SFT_TENANT, "--socket", daemon.socket(), "--tenant", "billed", "--steps", "40",
                         "--report-every", "0"},
                        {.stdout_path = dir.path + "/t.out", .stderr_path = dir.path + "/t.err"});
  REQUIRE(wait_exit(t, std::chrono::seconds(120)) == 0);
  const auto [urc, usage] = run_json({nexusctl_path(), "-s", daemon.socket(), "usage", "--json"}, dir, "usage");
  REQUIRE(urc == 0);
  REQUIRE(usage["tenants"].size() == 1);
  const auto& billed = usage["tenants"][0];
  CHECK(billed["name"] == "billed");
  CHECK(billed["steps"] == 40);
  CHECK(billed["samples"].get<int>() >= 40 * 16);
  CHECK(billed["compute_s"].get<double>() > 0);
  CHECK(billed["share"].get<double>() == Approx(1.0));
  CHECK(usage["services"]["training"]["busy_s"].get<double>() > 0);
  const auto [src, since] = run_json({nexusctl_path(), "-s", daemon.socket(), "usage", "--since", "1h", "--json"}, dir, "since");
  CHECK(src == 0);
  // The exposition parses with Prometheus's own parser (prometheus_client, in the venv).
  const pid_t m = spawn({nexusctl_path(), "-s", daemon.socket(), "metrics"}, {.stdout_path = dir.path + "/metrics.txt"});
  REQUIRE(wait_exit(m, std::chrono::seconds(10)) == 0);
  const std::string parse =
      "import sys\nfrom prometheus_client.parser import text_string_to_metric_families as f\n"
      "fams = {x.name: x for x in f(open(sys.argv[1]).read())}\n"
      "s = [v.value for v in fams['nexus_tenant_compute_seconds'].samples if v.labels['tenant'] == 'billed']\n"
      "assert sum(s) > 0, s\nassert 'nexus_service_utilization' in fams\nprint(len(fams))\n";
  const auto [prc, families] = run_json({NEXUS_TEST_PYTHON, "-c", parse, dir.path + "/metrics.txt"}, dir, "parse");
  INFO(read_file(dir.path + "/parse.err") << read_file(dir.path + "/metrics.txt").substr(0, 600));
  CHECK(prc == 0);
  CHECK(families.get<int>() >= 15);
  // top in a real 80x24 terminal (tmux), read back with capture-pane.
  const std::string session = "nexus-top-" + std::to_string(::getpid());
  const std::string top = nexusctl_path() + " -s " + daemon.socket() + " top --interval 0.3 --iterations 3; sleep 30";
  REQUIRE(std::system(("tmux new-session -d -s " + session + " -x 80 -y 24 '" + top + "'").c_str()) == 0);
  const std::string pane = dir.path + "/pane.txt";
  // Read back until top has drawn its table (its last line, JOB's header), not after a fixed wait.
  eventually([&] {
    std::system(("tmux capture-pane -p -t " + session + " > " + pane).c_str());
    return read_file(pane).find("JOB") != std::string::npos;
  }, std::chrono::seconds(30));
  std::system(("tmux kill-session -t " + session).c_str());
  const std::string screen = read_file(pane);
  INFO(screen);
  std::istringstream lines(screen);
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) CHECK(line.size() <= 80);
  CHECK(n <= 24);
  CHECK_THAT(screen, Catch::Contains("TENANT") && Catch::Contains("billed") && Catch::Contains("JOB"));
}

TEST_CASE("an evaluation leaves a flow head's checkpoint byte for byte as it was, RNG included",
          "[integration][model][jobs]") {
  // Flow heads sample noise when they predict; if evaluation drew it from the training RNG, the
  // saved RNG state (and so every later training step) would differ after an evaluation.
  TempDir dir;
  const std::string file = dir.path + "/reach.hdf5";
  REQUIRE(run_json({nexusctl_path(), "dataset", "record", "--task", "reach", "--episodes", "4", "--out", file}, dir,
                   "record").first == 0);
  const std::string state = dir.path + "/state";
  Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn", "--state-dir", state});
  auto c = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "flowy", .timeout = std::chrono::seconds(60)});
  c->register_tenant({.head = {.kind = "flow", .state_dim = 4, .action_dim = 2, .chunk = 4}});
  c->dataset_load("demos", file);
  REQUIRE(wait_job(*c, c->job_start({.kind = "sft", .dataset = "demos", .steps = 5, .batch = 8, .chunk = 4}),
                   std::chrono::seconds(60)).state == "finished");
  c->publish();
  const auto before = c->slot_digest();
  c->save("before");
  const auto eval = wait_job(*c, c->job_start({.kind = "eval", .task = "reach", .episodes = 2, .seed = 7}),
                             std::chrono::seconds(120));
  REQUIRE(eval.state == "finished");
  CHECK(c->slot_digest() == before);
  c->save("after");
  const auto dir_of = state + "/tenants/" + std::to_string(::geteuid()) + "/flowy/checkpoints/";
  const auto a = read_file(dir_of + "before.safetensors"), b = read_file(dir_of + "after.safetensors");
  REQUIRE(!a.empty());
  const bool same_bytes = a == b;  // not CHECK(a == b): Catch would print both files
  CHECK(same_bytes);
}
