// nexus-bench workload (workload.hpp): the reference mix shared vs isolated-sequential.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "nexus/status.hpp"
#include "processes.hpp"
#include "workload.hpp"

namespace nexus::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct TenantWork {
  std::string name, what;
  std::vector<std::string> argv;  // without --socket
};

struct Run {
  double wall_s = 0;
  std::map<std::string, double> finished_s;  // since the run began
  std::map<std::string, nlohmann::json> results;
  DaemonStatus status;                       // accounting at the end
  std::vector<std::map<std::string, double>> lanes;  // per executor: nexus_executor_seconds_total by part
  std::string timeline_csv;                  // the daemon's busy intervals
  double cpu_s = 0;                          // CPU time of the daemon and the tenants while it ran
};

// nexus_executor_seconds_total{replica="i",lane="l",...,part="p"} v -> lanes[k][p] = v, one k
// per (replica, lane) in the order the metrics list them.
std::vector<std::map<std::string, double>> executor_profile(const std::string& metrics) {
  std::vector<std::map<std::string, double>> lanes;
  std::vector<std::string> seen;  // each lane's labels before part=
  std::istringstream in(metrics);
  const std::string family = "nexus_executor_seconds_total{";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(family, 0) != 0) continue;
    const auto part_label = line.find("part=\"");
    const auto which = line.substr(0, part_label);
    auto at = std::find(seen.begin(), seen.end(), which);
    if (at == seen.end()) seen.push_back(which), lanes.emplace_back(), at = seen.end() - 1;
    const auto part = line.substr(part_label + 6, line.find('"', part_label + 6) - part_label - 6);
    lanes[static_cast<std::size_t>(at - seen.begin())][part] = std::stod(line.substr(line.rfind(' ') + 1));
  }
  return lanes;
}

// A lane's wall time split: backbone, copy, heads, optimizer, lease (a turn waiting for a slot
// another lane's turn held), other (the rest of its turns), wait (no turn), as shares of `wall_s`.
nlohmann::json lane_split(const std::map<std::string, double>& lane, double wall_s) {
  auto at = [&](const char* k) { return lane.count(k) ? lane.at(k) : 0.0; };
  const double turns = at("turns");
  const double other = turns - at("backbone") - at("copy") - at("heads") - at("optimizer");
  // A lease is waited for before its turn begins (not in "turns"), as "wait" is for work.
  return {{"backbone", at("backbone") / wall_s}, {"copy", at("copy") / wall_s},   {"heads", at("heads") / wall_s},
          {"optimizer", at("optimizer") / wall_s}, {"lease", at("lease") / wall_s}, {"other", other / wall_s},
          {"wait", 1 - (turns + at("lease")) / wall_s}, {"busy", turns / wall_s},
          {"narrow", at("narrow") / wall_s}};  // of the turns: on a share of the cores, beside other lanes
}

// CPU seconds of every child this process has reaped (the tenants, once waited for).
double reaped_children_cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_CHILDREN, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

std::vector<TenantWork> reference_mix(const WorkloadOptions& o, const std::string& dataset) {
  auto n = [&](double base) { return std::to_string(std::max(1L, std::lround(base * o.scale))); };
  return {{"alice", "PPO reach", {o.rl_tenant, "-t", "alice", "--algorithm", "ppo", "--task", "reach", "--iterations", n(20),
                                  "--seed", "1", "--report-every", "0"}},
          {"bob", "PPO push", {o.rl_tenant, "-t", "bob", "--algorithm", "ppo", "--task", "push", "--iterations", n(15),
                               "--seed", "2", "--report-every", "0"}},
          {"carol", "GRPO reach", {o.rl_tenant, "-t", "carol", "--algorithm", "grpo", "--task", "reach", "--iterations",
                                   n(10), "--sessions", "32", "--group-size", "4", "--seed", "3", "--report-every", "0"}},
          {"erin", "SFT demos", {o.sft_demos_tenant, "-t", "erin", "--dataset", dataset, "--steps", n(400), "--batch", "32",
                                 "--report-every", "0"}}};
}

Run run_on_one_daemon(const WorkloadOptions& o, const std::vector<TenantWork>& tenants, const std::string& dir,
                      const std::string& label) {
  Run run;
  const std::string timeline = dir + "/" + label + "-timeline.csv";
  {
    std::vector<std::string> args{"--log-level", "warn", "--timeline", timeline};
    if (o.inference_lanes >= 0 || o.training_lanes >= 0 || o.torch_threads >= 0) {
      std::ofstream config(dir + "/nexusd.toml");
      config << "[model]\n";
      if (o.inference_lanes >= 0) config << "inference_lanes = " << o.inference_lanes << "\n";
      if (o.training_lanes >= 0) config << "training_lanes = " << o.training_lanes << "\n";
      if (o.torch_threads >= 0) config << "torch_threads = " << o.torch_threads << "\n";
      args.insert(args.end(), {"-c", dir + "/nexusd.toml"});
    }
    test::Daemon daemon(args, o.nexusd);
    const auto t0 = Clock::now();
    // Counted from here, as wall time is: the daemon's start-up (loading the backbone) is not.
    const double daemon_cpu0 = test::process_cpu_seconds(daemon.pid()), tenants_cpu0 = reaped_children_cpu_s();
    std::vector<pid_t> pids;
    for (const auto& t : tenants) {
      auto argv = t.argv;
      argv.insert(argv.begin() + 1, {"--socket", daemon.socket()});
      pids.push_back(test::spawn(argv, {.stdout_path = dir + "/" + label + "-" + t.name + ".json",
                                        .stderr_path = dir + "/" + label + "-" + t.name + ".err"}));
    }
    // Finish times in the order they come (polling all, so a later one is not timed late).
    std::vector<bool> done(pids.size(), false);
    for (std::size_t left = pids.size(); left > 0;) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (done[i]) continue;
        const auto rc = test::wait_exit(pids[i], std::chrono::milliseconds(0));
        if (!rc) continue;
        done[i] = true, --left;
        run.finished_s[tenants[i].name] = std::chrono::duration<double>(Clock::now() - t0).count();
        if (*rc != 0)
          throw std::runtime_error(tenants[i].name + " failed: " + test::read_file(dir + "/" + label + "-" + tenants[i].name + ".err"));
        run.results[tenants[i].name] = nlohmann::json::parse(test::last_line(dir + "/" + label + "-" + tenants[i].name + ".json"));
      }
      if (left) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    run.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    run.cpu_s = test::process_cpu_seconds(daemon.pid()) - daemon_cpu0 + reaped_children_cpu_s() - tenants_cpu0;
    run.status = query_status(daemon.socket());
    run.lanes = executor_profile(query_metrics(daemon.socket()));
  }  // the daemon stops here and writes its timeline
  run.timeline_csv = test::read_file(timeline);
  return run;
}

double compute_of(const Run& r, const std::string& tenant) {
  for (const auto& u : r.status.usage)
    if (u.name == tenant) return u.compute_s();
  return 0;
}

std::string result_of(const TenantWork& t, const nlohmann::json& j) {
  char b[128];
  if (j.contains("recent_success"))
    std::snprintf(b, sizeof b, "%d updates, recent success %.2f", j.value("iterations", 0), j.value("recent_success", 0.0));
  else
    std::snprintf(b, sizeof b, "%d steps, loss %.4f", j.value("steps", 0), j.value("last_loss", 0.0));
  return b;
}

}  // namespace

int run_workload(const WorkloadOptions& o) {
  std::string dir = o.out;
  if (dir.empty()) {
    char tmpl[] = "/tmp/nexus-workload-XXXXXX";
    dir = ::mkdtemp(tmpl);
  }
  std::filesystem::create_directories(dir);
  if (o.scenario != "all" && o.scenario != "mix" && o.scenario != "sft-cache")
    throw std::runtime_error("--scenario is mix, sft-cache or all, not '" + o.scenario + "'");
  if (o.scenario == "sft-cache") {
    nlohmann::json j = {{"scale", o.scale}, {"out", dir}, {"sft_cache", run_sft_cache(o, dir)}};
    if (o.json) std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  const std::string dataset = dir + "/reach.hdf5";
  std::fprintf(stderr, "[workload] recording 100 reach demonstrations for erin ...\n");
  const pid_t rec = test::spawn({o.nexusctl, "dataset", "record", "--task", "reach", "--episodes", "100", "--out", dataset},
                                {.stdout_path = dir + "/record.out", .stderr_path = dir + "/record.err"});
  if (test::wait_exit(rec, std::chrono::seconds(300)) != 0) throw std::runtime_error("recording the demonstrations failed");
  const auto mix = reference_mix(o, dataset);

  std::fprintf(stderr, "[workload] shared: the four tenants on one daemon ...\n");
  const Run shared = run_on_one_daemon(o, mix, dir, "shared");
  std::fprintf(stderr, "[workload] shared run took %.1f s\n", shared.wall_s);
  std::map<std::string, Run> alone;
  double isolated_s = 0, busy_train = 0, busy_infer = 0, busy_env = 0, cpu_isolated = 0;
  for (const auto& t : mix) {
    std::fprintf(stderr, "[workload] isolated: %s alone on a fresh daemon ...\n", t.name.c_str());
    alone[t.name] = run_on_one_daemon(o, {t}, dir, "alone-" + t.name);
    const auto& r = alone[t.name];
    isolated_s += r.wall_s, cpu_isolated += r.cpu_s;
    busy_train += r.status.training_busy_s, busy_infer += r.status.inference_busy_s, busy_env += r.status.environment_busy_s;
    std::fprintf(stderr, "[workload] %s alone took %.1f s\n", t.name.c_str(), r.wall_s);
  }
  // Finish-time fairness: each tenant's completion shared over its time alone; the error is
  // the spread of those slowdowns relative to their mean (0: everyone slowed down alike).
  double lo = 1e300, hi = 0, mean = 0;
  for (const auto& t : mix) {
    const double rho = shared.finished_s.at(t.name) / alone.at(t.name).wall_s;
    lo = std::min(lo, rho), hi = std::max(hi, rho), mean += rho / static_cast<double>(mix.size());
  }
  nlohmann::json j = {
      {"scale", o.scale}, {"shared_s", shared.wall_s}, {"isolated_s", isolated_s},
      {"compute_time_reduction", 1 - shared.wall_s / isolated_s},
      {"train_util_isolated", busy_train / isolated_s}, {"train_util_shared", shared.status.training_busy_s / shared.wall_s},
      {"infer_util_isolated", busy_infer / isolated_s}, {"infer_util_shared", shared.status.inference_busy_s / shared.wall_s},
      {"env_util_isolated", busy_env / isolated_s}, {"env_util_shared", shared.status.environment_busy_s / shared.wall_s},
      {"fairness_error", (hi - lo) / mean}, {"out", dir}};
  // What the machine allows, measured: the cores were busy cpu_util of the time. Had sharing
  // added no CPU work, the shared run could not take less than the isolated runs' CPU time
  // spread over every core: the most any scheduler could save on this machine.
  const double cores = static_cast<double>(::sysconf(_SC_NPROCESSORS_ONLN));
  j["cores"] = cores;
  j["inference_lanes"] = o.inference_lanes, j["training_lanes"] = o.training_lanes;  // < 0: nexusd's defaults
  j["torch_threads"] = o.torch_threads;  // < 0: nexusd's default
  j["cpu_s_isolated"] = cpu_isolated, j["cpu_s_shared"] = shared.cpu_s;
  const double cpu_util_isolated = cpu_isolated / (cores * isolated_s);
  j["cpu_util_isolated"] = cpu_util_isolated;
  j["cpu_util_shared"] = shared.cpu_s / (cores * shared.wall_s);
  j["reduction_ceiling"] = 1 - cpu_util_isolated;
  j["reduction_over_ceiling"] = j["compute_time_reduction"].get<double>() / j["reduction_ceiling"].get<double>();
  // Sharing also removes CPU work (group passes, one daemon instead of one per tenant), so the
  // shared run's CPU seconds can be fewer than the isolated runs': then the ceiling above is
  // no bound. The bound for the work the shared run did: its CPU seconds over every core.
  j["reduction_ceiling_shared_work"] = 1 - shared.cpu_s / (cores * isolated_s);
  j["reduction_over_shared_work_ceiling"] =
      j["compute_time_reduction"].get<double>() / j["reduction_ceiling_shared_work"].get<double>();
  for (std::size_t i = 0; i < shared.lanes.size(); ++i)
    j["executor_busy_shared"].push_back(lane_split(shared.lanes[i], shared.wall_s)["busy"]);
  std::ofstream csv(dir + "/workload.csv");
  csv << "mode,tenant,work,wall_s,compute_s,result\n";
  std::printf("%-7s %-12s %10s %10s %12s %12s  %s\n", "tenant", "work", "alone s", "shared s", "compute alone",
              "compute shared", "result (shared)");
  for (const auto& t : mix) {
    const auto& a = alone.at(t.name);
    std::printf("%-7s %-12s %10.1f %10.1f %12.1f %12.1f  %s\n", t.name.c_str(), t.what.c_str(), a.wall_s,
                shared.finished_s.at(t.name), compute_of(a, t.name), compute_of(shared, t.name),
                result_of(t, shared.results.at(t.name)).c_str());
    csv << "isolated," << t.name << ',' << t.what << ',' << a.wall_s << ',' << compute_of(a, t.name) << ",\""
        << result_of(t, a.results.at(t.name)) << "\"\n";
    csv << "shared," << t.name << ',' << t.what << ',' << shared.finished_s.at(t.name) << ',' << compute_of(shared, t.name)
        << ",\"" << result_of(t, shared.results.at(t.name)) << "\"\n";
    j["tenants"][t.name] = {{"alone_s", a.wall_s}, {"shared_s", shared.finished_s.at(t.name)},
                            {"compute_alone_s", compute_of(a, t.name)}, {"compute_shared_s", compute_of(shared, t.name)},
                            {"result_alone", a.results.at(t.name)}, {"result_shared", shared.results.at(t.name)}};
  }
  std::printf("\naggregate device time: isolated %.1f s (sum of runs), shared %.1f s: %.1f%% less\n", isolated_s,
              shared.wall_s, 100 * j["compute_time_reduction"].get<double>());
  std::printf("utilization (busy / wall):  training %.1f%% -> %.1f%%   inference %.1f%% -> %.1f%%   environment %.1f%% -> %.1f%%\n",
              100 * j["train_util_isolated"].get<double>(), 100 * j["train_util_shared"].get<double>(),
              100 * j["infer_util_isolated"].get<double>(), 100 * j["infer_util_shared"].get<double>(),
              100 * j["env_util_isolated"].get<double>(), 100 * j["env_util_shared"].get<double>());
  std::printf("CPU (daemon and tenants) over %.0f cores: isolated %.1f s, %.1f%% busy; shared %.1f s, %.1f%% busy\n"
              "  the most any schedule could save here, had sharing added no CPU work: %.1f%%\n",
              cores, cpu_isolated, 100 * j["cpu_util_isolated"].get<double>(), shared.cpu_s,
              100 * j["cpu_util_shared"].get<double>(), 100 * j["reduction_ceiling"].get<double>());
  std::printf("  the reduction measured is %.2f of that ceiling; the executor was busy", j["reduction_over_ceiling"].get<double>());
  for (const auto& b : j["executor_busy_shared"]) std::printf(" %.1f%%", 100 * b.get<double>());
  std::printf(" of the shared run (per lane)\n");
  std::printf("  for the shared run's own CPU work (%.1f s, where sharing removed some) the most it could save is %.1f%%:"
              " %.2f of that\n",
              shared.cpu_s, 100 * j["reduction_ceiling_shared_work"].get<double>(),
              j["reduction_over_shared_work_ceiling"].get<double>());
  std::printf("finish-time fairness error: %.2f (spread of shared/alone completion ratios over their mean)\n",
              j["fairness_error"].get<double>());
  if (o.profile) {
    // Where each lane's time went: the next bottleneck, without a profiler.
    std::printf("\nexecutor profile (share of the run's wall time)\n%-16s %5s %9s %7s %7s %10s %7s %7s %7s\n", "run",
                "lane", "backbone", "copy", "heads", "optimizer", "lease", "other", "wait");
    auto row = [&](const std::string& name, const Run& r) {
      for (std::size_t i = 0; i < r.lanes.size(); ++i) {
        const auto s = lane_split(r.lanes[i], r.wall_s);
        std::printf("%-16s %5zu %8.1f%% %6.1f%% %6.1f%% %9.1f%% %6.1f%% %6.1f%% %6.1f%%\n", name.c_str(), i,
                    100 * s["backbone"].get<double>(), 100 * s["copy"].get<double>(), 100 * s["heads"].get<double>(),
                    100 * s["optimizer"].get<double>(), 100 * s["lease"].get<double>(), 100 * s["other"].get<double>(),
                    100 * s["wait"].get<double>());
        j["profile"][name].push_back(s);
      }
    };
    row("shared", shared);
    for (const auto& t : mix) row("alone-" + t.name, alone.at(t.name));
  }
  // One timeline: the shared run, then the isolated runs one after another.
  std::ofstream tl(dir + "/timeline.csv");
  tl << "mode,service,tenant,start_s,end_s\n";
  auto append = [&](const std::string& mode, const std::string& csv_text, double offset) {
    std::istringstream in(csv_text);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string service, tenant, start, end;
      std::getline(f, service, ','), std::getline(f, tenant, ','), std::getline(f, start, ','), std::getline(f, end, ',');
      if (!end.empty()) tl << mode << ',' << service << ',' << tenant << ',' << std::stod(start) + offset << ',' << std::stod(end) + offset << '\n';
    }
  };
  append("shared", shared.timeline_csv, 0);
  double offset = 0;
  for (const auto& t : mix) append("isolated", alone.at(t.name).timeline_csv, offset), offset += alone.at(t.name).wall_s;
  tl.close();
  const std::string png = dir + "/timeline.png";
  const pid_t plot = test::spawn({o.python, o.plot_script, dir + "/timeline.csv", png}, {.stderr_path = dir + "/plot.err"});
  if (test::wait_exit(plot, std::chrono::seconds(120)) == 0) j["png"] = png;
  std::printf("files: %s/workload.csv, %s/timeline.csv%s\n", dir.c_str(), dir.c_str(),
              j.contains("png") ? (", " + png).c_str() : " (no plot: see plot.err)");
  if (o.scenario == "all") j["sft_cache"] = run_sft_cache(o, dir);
  if (o.json) std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace nexus::bench
