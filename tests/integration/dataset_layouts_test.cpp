// Bring your own demonstrations: files in the robomimic and LIBERO layouts, written by h5py under
// those projects' key names (tests/datasets/make_layout_files.py, from reach recordings), load
// with their own views, state and splits, and SFT on them through nexusd lowers the held-out
// action error below the error of always predicting the mean action.
#include <catch2/catch.hpp>

#include "figures.hpp"
#include "nexus/client.hpp"
#include "processes.hpp"
#include "tenant_run.hpp"

using namespace nexus::test;

namespace {

// Reach recordings rewritten into both layouts, once for the file's test cases.
struct LayoutFiles {
  TempDir dir;
  std::string robomimic, libero, libero_heldout;

  LayoutFiles() {
    const std::uint64_t k = test_seed();
    const std::string source = dir.path + "/reach.hdf5", heldout = dir.path + "/reach-heldout.hdf5";
    REQUIRE(run_json({nexusctl_path(), "dataset", "record", "--task", "reach", "--episodes", "150", "--seed",
                      std::to_string(300000 + 100000 * k), "--out", source},
                     dir, "record")
                .first == 0);
    REQUIRE(run_json({nexusctl_path(), "dataset", "record", "--task", "reach", "--episodes", "45", "--seed",
                      std::to_string(377000 + 100000 * k), "--out", heldout},
                     dir, "record-heldout")
                .first == 0);
    const auto [rc, made] = run_json({NEXUS_TEST_PYTHON, NEXUS_TEST_LAYOUT_SCRIPT, "--source", source, "--heldout",
                                      heldout, "--out", dir.path},
                                     dir, "layouts");
    INFO(read_file(dir.path + "/layouts.err"));
    REQUIRE(rc == 0);
    robomimic = dir.path + "/robomimic.hdf5";
    libero = dir.path + "/libero.hdf5";
    libero_heldout = dir.path + "/libero-heldout.hdf5";
  }

  nlohmann::json info(const std::string& file, std::vector<std::string> extra = {}) const {
    std::vector<std::string> argv = {nexusctl_path(), "dataset", "info", file, "--json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto [rc, j] = run_json(argv, dir, "info");
    INFO(read_file(dir.path + "/info.err"));
    REQUIRE(rc == 0);
    return j;
  }
};

LayoutFiles& files() {
  static LayoutFiles f;
  return f;
}

using Keys = std::vector<std::string>;

}  // namespace

TEST_CASE("robomimic and LIBERO files load with their own views, state keys, sizes and splits",
          "[integration][datasets]") {
  auto& f = files();
  const auto r = f.info(f.robomimic);
  INFO(r.dump());
  CHECK(r["layout"] == "robomimic");
  CHECK(r["views"] == Keys{"agentview_image", "robot0_eye_in_hand_image"});
  CHECK(r["state_keys"] == Keys{"robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos"});
  CHECK(r["state_dim"] == 9);  // 3 + 4 + 2
  CHECK(r["action_dim"] == 7);
  CHECK(r["source_image_size"] == 84);
  CHECK(r["masks"] == true);
  CHECK(r["valid_demos"] == 30);  // robomimic's /mask/valid: 20% of 150
  CHECK(r["train_demos"] == 120);
  CHECK(r["action_std"][6] == 1.0);  // the closed gripper never moves: centred, not scaled
  CHECK(f.info(f.robomimic, {"--image-size", "64"})["image_size"] == 64);

  const auto l = f.info(f.libero);
  INFO(l.dump());
  CHECK(l["layout"] == "libero");
  CHECK(l["views"] == Keys{"agentview_rgb", "eye_in_hand_rgb"});
  CHECK(l["state_keys"] == Keys{"ee_states", "gripper_states"});
  CHECK(l["state_dim"] == 8);  // 6 + 2
  CHECK(l["source_image_size"] == 128);
  CHECK(l["masks"] == false);

  // nexusd reads the same: the training demos' steps are what it samples, with the same
  // statistics nexusctl computed.
  {
    Daemon daemon({"--weights", tiny_weights_path(), "--state-dir", f.dir.path + "/state-load", "--log-level", "warn"});
    nexus::ClientOptions o;
    o.socket_path = daemon.socket();
    o.tenant = "loader";
    auto c = nexus::Client::attach(o);
    nexus::DatasetOptions norm;
    norm.normalize = true;
    const auto d = c->dataset_load("robo", f.robomimic, norm);
    CHECK(d.layout == "robomimic");
    CHECK(d.views == r["views"].get<Keys>());
    CHECK(d.state_dim == 9);
    CHECK(d.source_image_size == 84);
    CHECK(d.train_episodes == 120);
    CHECK(d.valid_episodes == 30);
    CHECK(d.samples == r["train_steps"].get<std::uint64_t>());  // the valid demos are never sampled
    CHECK(d.samples < r["steps"].get<std::uint64_t>());
    CHECK(d.action_mean == r["action_mean"].get<std::vector<float>>());
    CHECK(d.state_std == r["state_std"].get<std::vector<float>>());
  }

  // Other layouts name their keys; a key the file lacks is a clear error.
  const auto named = f.info(f.libero, {"--views", "eye_in_hand_rgb", "--state-keys", "joint_states,gripper_states"});
  CHECK(named["layout"] == "named");
  CHECK(named["views"] == Keys{"eye_in_hand_rgb"});
  CHECK(named["state_dim"] == 9);
  const auto [rc, out] = run_json({nexusctl_path(), "dataset", "info", f.libero, "--views", "wrist_cam"}, f.dir, "bad");
  CHECK(rc != 0);
  CHECK_THAT(read_file(f.dir.path + "/bad.err"), Catch::Contains("obs/wrist_cam: missing camera images"));
}

TEST_CASE("SFT through nexusd on robomimic and LIBERO files beats the mean action on held-out demos",
          "[integration][model][datasets][learning]") {
  auto& f = files();
  const std::uint64_t k = test_seed();
  Daemon daemon({"--weights", tiny_weights_path(), "--state-dir", f.dir.path + "/state", "--log-level", "warn"});
  auto sft = [&](const std::string& tenant, const std::string& file, std::vector<std::string> extra) {
    std::vector<std::string> argv = {NEXUS_TEST_SFT_DEMOS_TENANT, "--socket", daemon.socket(), "--tenant", tenant,
                                     "--dataset", file, "--steps", "800", "--batch", "32", "--seed",
                                     std::to_string(k), "--report-every", "0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    // 800 two-camera steps took over 300 s in a fresh Debian root (LibTorch 1.13) under ctest -j2,
    // beside python.pip_install's compile and the fuzz run: the limit is for a hang, not a speed.
    return run_json(argv, f.dir, "sft-" + tenant, std::chrono::seconds(900));
  };
  auto heldout = [&](const std::string& tenant, std::vector<std::string> extra) {
    std::vector<std::string> argv = {NEXUS_TEST_EVAL_TENANT, "--socket", daemon.socket(), "--tenant", tenant};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_json(argv, f.dir, "heldout-" + tenant);
  };

  SECTION("robomimic: two 84-pixel cameras, its own state keys, normalised, held out by its mask") {
    const auto [rc, trained] = sft("robo", f.robomimic, {"--normalize"});
    INFO(trained.dump() << read_file(f.dir.path + "/sft-robo.err"));
    REQUIRE(rc == 0);
    CHECK(trained["layout"] == "robomimic");
    CHECK(trained["views"] == 2);
    CHECK(trained["state_dim"] == 9);
    CHECK(trained["valid_demos"] == 30);
    const auto [hrc, h] = heldout("robo", {"--dataset", f.robomimic, "--normalize"});
    INFO(h.dump() << read_file(f.dir.path + "/heldout-robo.err"));
    REQUIRE(hrc == 0);
    CHECK(h["unchanged"] == true);
    CHECK(h["heldout_samples"].get<int>() > 200);
    // Bounds: docs/design/learning-margins.md (seed distribution).
    CHECK(figure_holds("layouts.robomimic_heldout_vs_mean",
                       h["action_error"].get<double>() / h["mean_baseline_error"].get<double>(), "<", 1.0));
  }
  SECTION("LIBERO: two 128-pixel cameras, one task per file, held out in a second file") {
    const auto [rc, trained] = sft("libero", f.libero, {"--normalize"});
    INFO(trained.dump() << read_file(f.dir.path + "/sft-libero.err"));
    REQUIRE(rc == 0);
    CHECK(trained["layout"] == "libero");
    CHECK(trained["views"] == 2);
    CHECK(trained["state_dim"] == 8);
    const auto [hrc, h] =
        heldout("libero", {"--dataset", f.libero_heldout, "--train-dataset", f.libero, "--normalize"});
    INFO(h.dump() << read_file(f.dir.path + "/heldout-libero.err"));
    REQUIRE(hrc == 0);
    CHECK(h["unchanged"] == true);
    CHECK(figure_holds("layouts.libero_heldout_vs_mean",
                       h["action_error"].get<double>() / h["mean_baseline_error"].get<double>(), "<", 0.9));
  }
}
