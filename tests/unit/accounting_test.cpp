// Accounting: per-tenant charges and their history window, busy time as the union of
// overlapping spans, quantiles, and the Prometheus exposition's shape.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "daemon/metrics/accounting.hpp"
#include "daemon/metrics/prometheus.hpp"

using namespace nexus::metrics;

TEST_CASE("charges add up per tenant and per queue", "[metrics]") {
  Accounting a;
  a.charge("alice", Service::Training, 1.5, 64, 1);
  a.charge("alice", Service::Inference, 0.5, 8, 0, 1);
  a.charge("bob", Service::Training, 2.0, 32, 1);
  a.env_steps("bob", 40);
  const auto s = a.snapshot();
  CHECK(s.tenants.at("alice").compute_s() == Approx(2.0));
  CHECK(s.tenants.at("alice").samples == 72);
  CHECK(s.tenants.at("alice").predictions == 1);
  CHECK(s.tenants.at("bob").train_s == Approx(2.0));
  CHECK(s.tenants.at("bob").env_steps == 40);
}

TEST_CASE("overlapping busy spans of one service count once", "[metrics]") {
  Accounting a;
  const auto t0 = std::chrono::steady_clock::now();
  const auto outer = a.begin(Service::Environment);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto inner = a.begin(Service::Environment);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  a.end(Service::Environment, inner, "bob");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  a.end(Service::Environment, outer, "alice");
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto s = a.snapshot();
  const double busy = s.busy_s[static_cast<int>(Service::Environment)];
  CHECK(busy >= 0.058);
  // The union is at most the outer span's wall time; the sum would exceed it by the inner
  // span (>= 20 ms), however long the sleeps overshoot on a loaded machine.
  CHECK(busy <= wall);
  CHECK(s.busy_s[static_cast<int>(Service::Training)] == 0);
}

TEST_CASE("queue-wait quantiles by nearest rank over the recent window", "[metrics]") {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  CHECK(quantile(v, 0.5) == 50);
  CHECK(quantile(v, 0.99) == 99);
  CHECK(quantile({}, 0.5) == 0);
  Accounting a;
  for (int i = 1; i <= 3000; ++i) a.queue_wait("t", Service::Training, i);
  const auto w = a.snapshot().train_wait.at("t");
  CHECK(w.count == Accounting::kWaitWindow);  // the oldest fell out of the window
  CHECK(w.p50_us > 1000);
}

TEST_CASE("the exposition names every family once, with HELP and TYPE before its samples", "[metrics]") {
  nexus::daemon::ServiceStatus st;
  st.backbone = "tiny";
  st.usage.wall_s = 10;
  st.usage.tenants["alice"] = {1.0, 0.5, 10, 2, 3, 4};
  st.usage.train_wait["alice"] = {5, 100, 10, 40};
  st.jobs.push_back({.id = 1, .tenant = "alice", .kind = "sft", .state = nexus::daemon::JobState::Running});
  const auto text = render_prometheus({12.5, 1, 4096}, &st);
  CHECK_THAT(text, Catch::Contains("nexus_tenant_compute_seconds_total{tenant=\"alice\",queue=\"training\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("# TYPE nexus_tenant_queue_wait_seconds summary\n"));
  CHECK_THAT(text, Catch::Contains("nexus_jobs{state=\"running\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("nexus_uptime_seconds 12.5\n"));
  std::size_t families = 0, pos = 0;
  while ((pos = text.find("# TYPE nexus_tenant_compute_seconds_total ", pos)) != std::string::npos) ++families, ++pos;
  CHECK(families == 1);
}
