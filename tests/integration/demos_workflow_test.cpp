// The demonstrations workflow through real processes: nexusctl records the reach expert into an
// HDF5 file; a tenant trains on it through nexusd; eval_tenant runs the published version in the
// simulator, read-only. (A small budget for CI; the demo script prints the full figure.)
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "figures.hpp"
#include "processes.hpp"
#include "tenant_run.hpp"

using namespace nexus::test;

namespace {
constexpr int kEpisodes = 50;  // closed-loop evaluation episodes
}  // namespace

TEST_CASE("recorded reach demonstrations train a head through nexusd, evaluation lifts success and changes nothing",
          "[integration][model][sim][datasets][learning]") {
  TempDir dir;
  const std::uint64_t k = test_seed();  // demonstrations, head, held-out and evaluation seeds
  const std::string file = dir.path + "/reach.hdf5";
  REQUIRE(run_json({nexusctl_path(), "dataset", "record", "--task", "reach", "--episodes", "100", "--seed",
                    std::to_string(100000 * k), "--out", file},
                   dir, "record")
              .first == 0);
  const auto [info_rc, info] = run_json({nexusctl_path(), "dataset", "info", file, "--json"}, dir, "info");
  REQUIRE(info_rc == 0);
  CHECK(info["demos"] == 100);
  CHECK(info["successes"] == 100);
  CHECK(info["state_dim"] == 4);

  Daemon daemon({"--weights", tiny_weights_path(), "--state-dir", dir.path + "/state", "--log-level", "warn"});
  auto sft = [&](const std::string& tenant, int steps) {
    return run_json({NEXUS_TEST_SFT_DEMOS_TENANT, "--socket", daemon.socket(), "--tenant", tenant, "--dataset", file,
                "--steps", std::to_string(steps), "--batch", "32", "--seed", std::to_string(k), "--report-every", "0"},
               dir, "sft-" + tenant);
  };
  auto eval = [&](const std::string& tenant) {
    return run_json({NEXUS_TEST_EVAL_TENANT, "--socket", daemon.socket(), "--tenant", tenant, "--episodes",
                     std::to_string(kEpisodes), "--version", "1", "--seed", std::to_string(90000 + 1000 * k)},
               dir, "eval-" + tenant);
  };
  REQUIRE(sft("untrained", 0).first == 0);
  REQUIRE(sft("trained", 800).first == 0);
  const auto [rc0, before] = eval("untrained");
  const auto [rc1, after] = eval("trained");
  INFO("untrained: " << before.dump() << "\ntrained: " << after.dump());
  REQUIRE(rc0 == 0);  // eval_tenant exits 3 if the slot's digests changed
  REQUIRE(rc1 == 0);
  CHECK(before["unchanged"] == true);
  CHECK(after["unchanged"] == true);
  CHECK(figure_holds("demos_workflow.success_before", before["success_rate"].get<double>(), "<=", 0.1, kEpisodes));
  // Action error on held-out demonstrations (new seeds): lower after training, still read-only.
  const std::string heldout = dir.path + "/heldout.hdf5";
  REQUIRE(run_json({nexusctl_path(), "dataset", "record", "--task", "reach", "--episodes", "10", "--seed", std::to_string(777000 + 100000 * k),
                    "--out", heldout},
                   dir, "record-heldout")
              .first == 0);
  auto action_error = [&](const std::string& tenant) {
    return run_json({NEXUS_TEST_EVAL_TENANT, "--socket", daemon.socket(), "--tenant", tenant, "--version", "1",
                     "--dataset", heldout},
                    dir, "heldout-" + tenant);
  };
  const auto [hrc0, h0] = action_error("untrained");
  const auto [hrc1, h1] = action_error("trained");
  INFO("held-out: " << h0.dump() << " vs " << h1.dump());
  REQUIRE(hrc0 == 0);
  REQUIRE(hrc1 == 0);
  CHECK(h1["heldout_samples"].get<int>() > 50);
  // Bounds: docs/design/learning-margins.md (seed distribution).
  CHECK(figure_holds("demos_workflow.heldout_error_ratio",
                     h1["action_error"].get<double>() / h0["action_error"].get<double>(), "<", 0.85));
  CHECK(figure_holds("demos_workflow.success_after", after["success_rate"].get<double>(), ">=", 0.12, kEpisodes));
}

TEST_CASE("a broken demonstration file is a clear error for its tenant, and nexusd serves on",
          "[integration][model][datasets]") {
  TempDir dir;
  const std::string garbage = dir.path + "/garbage.hdf5";
  std::ofstream(garbage) << "this is not an HDF5 file";
  Daemon daemon({"--weights", tiny_weights_path(), "--state-dir", dir.path + "/state", "--log-level", "warn"});
  const auto [rc, out] = run_json({NEXUS_TEST_SFT_DEMOS_TENANT, "--socket", daemon.socket(), "--tenant", "careless",
                              "--dataset", garbage, "--steps", "5"},
                             dir, "garbage");
  CHECK(rc == 2);
  CHECK(out["error"] == "BadDataset");
  CHECK(read_file(dir.path + "/garbage.err").find("garbage.hdf5") != std::string::npos);
  CHECK(nexus::query_status(daemon.socket()).pid == daemon.pid());
}

TEST_CASE("dataset requests are checked: names, files, batches, chunks", "[integration][model][datasets]") {
  TempDir dir;
  const std::string file = dir.path + "/reach.hdf5";
  REQUIRE(run_json({nexusctl_path(), "dataset", "record", "--task", "reach", "--episodes", "3", "--out", file}, dir,
                   "record")
              .first == 0);
  Daemon daemon({"--weights", tiny_weights_path(), "--state-dir", dir.path + "/state", "--log-level", "warn"});
  nexus::ClientOptions o;
  o.socket_path = daemon.socket();
  o.tenant = "dora";
  auto c = nexus::Client::attach(o);
  auto code = [](auto&& f) {
    try {
      f();
    } catch (const nexus::Error& e) {
      return e.code();
    }
    return nexus::ErrorCode::None;
  };
  CHECK(code([&] { c->dataset_load("../etc", file); }) == nexus::ErrorCode::BadMessage);
  CHECK(code([&] { c->dataset_load("d", dir.path + "/missing.hdf5"); }) == nexus::ErrorCode::BadDataset);
  const auto info = c->dataset_load("d", file);
  CHECK(info.episodes == 3);
  CHECK(info.state_dim == 4);
  nexus::TenantSpec spec;
  spec.head = {.kind = "mlp_chunk", .state_dim = 4, .action_dim = 2, .chunk = 4};
  c->register_tenant(spec);
  CHECK(code([&] { c->dataset_sft_step("nope", 8, 4); }) == nexus::ErrorCode::BadDataset);
  CHECK(code([&] { c->dataset_sft_step("d", 0, 4); }) == nexus::ErrorCode::BadBatch);
  CHECK(code([&] { c->dataset_sft_step("d", 8, 3); }) == nexus::ErrorCode::BadBatch);  // the head's chunk is 4
  CHECK(c->dataset_sft_step("d", 8, 4).step == 1);
  CHECK(c->dataset_sft_step("d", 8, 4).step == 2);
  CHECK(count_fds(daemon.pid(), "reach.hdf5") == 0);  // read whole, then closed

  // Keys the file lacks, more views than the backbone takes: refused, named.
  nexus::DatasetOptions keys;
  keys.views = {"wrist"};
  CHECK(code([&] { c->dataset_load("k", file, keys); }) == nexus::ErrorCode::BadDataset);
  keys.views = {"agentview_image", "agentview_image"};
  CHECK(code([&] { c->dataset_load("k", file, keys); }) == nexus::ErrorCode::BadDataset);
  keys.views = std::vector<std::string>(17, "v");
  CHECK(code([&] { c->dataset_load("k", file, keys); }) == nexus::ErrorCode::BadMessage);

  // Predictions in a dataset's units: only for one loaded with normalize, state of its width.
  const auto bb = c->backbone();
  auto images = c->alloc(nexus::DType::UInt8, {2, 1, bb.image_size, bb.image_size, 3});
  auto tokens = c->alloc(nexus::DType::Int32, {2, bb.max_tokens});
  auto mask = c->alloc(nexus::DType::UInt8, {2, bb.max_tokens});
  auto state = c->alloc(nexus::DType::Float32, {2, 4});
  auto narrow = c->alloc(nexus::DType::Float32, {2, 3});
  const nexus::Observation obs{&images, &tokens, &mask, &state};
  CHECK(code([&] { c->predict(obs, 0, "nope"); }) == nexus::ErrorCode::BadDataset);
  CHECK(code([&] { c->predict(obs, 0, "d"); }) == nexus::ErrorCode::BadDataset);  // loaded without normalize
  CHECK(code([&] { c->predict(obs, 0, "../d"); }) == nexus::ErrorCode::BadMessage);
  nexus::DatasetOptions norm;
  norm.normalize = true;
  const auto n = c->dataset_load("n", file, norm);
  REQUIRE(n.normalized);
  REQUIRE(n.action_mean.size() == 2);
  CHECK(code([&] { c->predict({&images, &tokens, &mask, &narrow}, 0, "n"); }) == nexus::ErrorCode::BadBatch);
  CHECK(code([&] { c->predict({&images, &tokens, &mask, nullptr}, 0, "n"); }) == nexus::ErrorCode::BadBatch);
  // The same observation: raw and in the dataset's units differ exactly by the statistics, and
  // nexusd left the state in the arena as the tenant wrote it.
  for (std::size_t i = 0; i < 8; ++i) state.as<float>().data()[i] = 0.1f * static_cast<float>(i);
  const auto before = std::vector<float>(state.as<float>().data(), state.as<float>().data() + 8);
  const auto in_units = c->predict(obs, 0, "n");
  CHECK(std::vector<float>(state.as<float>().data(), state.as<float>().data() + 8) == before);
  for (std::size_t i = 0; i < 8; ++i)
    state.as<float>().data()[i] = (before[i] - n.state_mean[i % 4]) / n.state_std[i % 4];
  const auto raw = c->predict(obs, 0);
  REQUIRE(raw.actions.size() == in_units.actions.size());
  for (std::size_t i = 0; i < raw.actions.size(); ++i)
    CHECK(in_units.actions[i] == Approx(n.action_mean[i % 2] + n.action_std[i % 2] * raw.actions[i]).epsilon(1e-4));
}
