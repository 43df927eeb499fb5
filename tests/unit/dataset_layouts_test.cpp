// Demonstration files as they come: layouts recognised by their keys, several cameras as views,
// resizing to the backbone's size, robomimic's train/valid masks, and the per-dataset
// normalisation (hand-computed values throughout). Files in the real robomimic and LIBERO layouts,
// written by h5py, are read in tests/integration/dataset_layouts_test.cpp.
#include <catch2/catch.hpp>

#include <hdf5.h>

#include <cmath>

#include "datasets/demo_file.hpp"
#include "datasets/layouts.hpp"
#include "datasets/normalizer.hpp"
#include "datasets/resize.hpp"
#include "processes.hpp"

using namespace nexus::datasets;

namespace {

std::vector<std::uint8_t> grey(std::int64_t side, const std::vector<int>& values) {  // R = G = B
  std::vector<std::uint8_t> img(static_cast<std::size_t>(side * side * 3));
  for (std::size_t i = 0; i < img.size(); ++i) img[i] = static_cast<std::uint8_t>(values[i / 3]);
  return img;
}

std::vector<int> red(const std::vector<std::uint8_t>& img) {
  std::vector<int> out;
  for (std::size_t i = 0; i < img.size(); i += 3) out.push_back(img[i]);
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DatasetError& e) {
    return e.what();
  }
  return "(no error)";
}

// Two views (the second the first's negative), state 3 wide, action 2 wide, episode i's values
// offset by i.
DemoFile two_view_file(std::int64_t side, int episodes) {
  DemoFile f;
  f.meta.task = "reach";
  f.meta.views = {"agentview_image", "robot0_eye_in_hand_image"};
  f.meta.image_size = side;
  f.meta.state_dim = 3;
  f.meta.action_dim = 2;
  for (int i = 0; i < episodes; ++i) {
    Episode e;
    e.instruction = "episode " + std::to_string(i);
    e.steps = 2;
    const std::size_t frame = static_cast<std::size_t>(side * side * 3);
    e.images.resize(2 * 2 * frame);
    for (std::size_t t = 0; t < 2; ++t)
      for (std::size_t p = 0; p < frame; ++p) {
        const auto v = static_cast<std::uint8_t>(10 * i + 100 * t + p % 7);
        e.images[(t * 2 + 0) * frame + p] = v;
        e.images[(t * 2 + 1) * frame + p] = static_cast<std::uint8_t>(255 - v);
      }
    e.proprio = {float(i), 1, 2, float(i) + 1, 1, 2};
    e.actions = {float(i), -1, float(i) + 2, 1};
    f.episodes.push_back(std::move(e));
  }
  return f;
}

// robomimic's masks: numpy byte strings (fixed-length, null-padded) under /mask/<split>.
void put_mask(const std::string& path, const char* split, const std::vector<std::string>& names) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(file >= 0);
  if (H5Lexists(file, "mask", H5P_DEFAULT) <= 0) H5Gclose(H5Gcreate2(file, "mask", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  const std::size_t width = 8;
  std::string raw(names.size() * width, '\0');
  for (std::size_t i = 0; i < names.size(); ++i) raw.replace(i * width, names[i].size(), names[i]);
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, width);
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  const hsize_t n = names.size();
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t d = H5Dcreate2(file, ("mask/" + std::string(split)).c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT,
                             H5P_DEFAULT);
  REQUIRE(d >= 0);
  REQUIRE(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) >= 0);
  H5Dclose(d);
  H5Sclose(space);
  H5Tclose(type);
  H5Fclose(file);
}

}  // namespace

TEST_CASE("resizing: area when shrinking, bilinear when enlarging, against hand-computed pixels", "[datasets]") {
  std::vector<std::uint8_t> out(2 * 2 * 3);
  SECTION("4 -> 2 averages each 2x2 block") {
    resize_rgb(grey(4, {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150}).data(), 4, out.data(), 2);
    CHECK(red(out) == std::vector<int>{25, 45, 105, 125});  // (0+10+40+50)/4 = 25, ...
  }
  SECTION("3 -> 2 weighs pixels by how much of each output pixel they cover") {
    // Output (0, 0) covers source [0, 1.5) x [0, 1.5): weights 2/3 and 1/3 on each axis.
    resize_rgb(grey(3, {90, 0, 0, 0, 0, 0, 0, 0, 0}).data(), 3, out.data(), 2);
    CHECK(red(out) == std::vector<int>{40, 0, 0, 0});  // 90 * (2/3)^2 = 40
    resize_rgb(grey(3, {0, 90, 0, 90, 90, 90, 0, 90, 0}).data(), 3, out.data(), 2);
    CHECK(red(out) == std::vector<int>{50, 50, 50, 50});  // 90 * (2/9 + 2/9 + 1/9): three of four taps lit
  }
  SECTION("2 -> 4 interpolates between pixel centres, clamped at the edges") {
    std::vector<std::uint8_t> big(4 * 4 * 3);
    resize_rgb(grey(2, {0, 100, 0, 100}).data(), 2, big.data(), 4);
    CHECK(red(big) == std::vector<int>{0, 25, 75, 100, 0, 25, 75, 100, 0, 25, 75, 100, 0, 25, 75, 100});
  }
  SECTION("equal sizes copy; a flat image stays flat at any size") {
    const auto src = grey(3, {1, 2, 3, 4, 5, 6, 7, 8, 9});
    std::vector<std::uint8_t> same(src.size());
    resize_rgb(src.data(), 3, same.data(), 3);
    CHECK(same == src);
    for (const std::int64_t to : {1, 5, 13, 64}) {
      std::vector<std::uint8_t> flat(static_cast<std::size_t>(to * to * 3));
      resize_rgb(grey(7, std::vector<int>(49, 77)).data(), 7, flat.data(), to);
      CHECK(red(flat) == std::vector<int>(static_cast<std::size_t>(to * to), 77));
    }
  }
}

TEST_CASE("layouts are recognised by their obs keys: only the keys a file has are chosen", "[datasets]") {
  const auto robomimic = recognise_layout({"agentview_image", "object", "robot0_eef_pos", "robot0_eef_quat",
                                           "robot0_eye_in_hand_image", "robot0_gripper_qpos", "robot0_joint_pos"});
  CHECK(robomimic.layout == "robomimic");
  CHECK(robomimic.views == std::vector<std::string>{"agentview_image", "robot0_eye_in_hand_image"});
  CHECK(robomimic.state_keys == std::vector<std::string>{"robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos"});
  const auto libero = recognise_layout({"agentview_rgb", "ee_ori", "ee_pos", "ee_states", "eye_in_hand_rgb",
                                        "gripper_states", "joint_states"});
  CHECK(libero.layout == "libero");
  CHECK(libero.views == std::vector<std::string>{"agentview_rgb", "eye_in_hand_rgb"});
  CHECK(libero.state_keys == std::vector<std::string>{"ee_states", "gripper_states"});
  const auto nexus = recognise_layout({"agentview_image", "robot0_proprio"});
  CHECK(nexus.layout == "nexus");
  CHECK(nexus.state_keys == std::vector<std::string>{"robot0_proprio"});
  CHECK(recognise_layout({"agentview_rgb"}).state_keys.empty());  // images only: state_dim 0
  CHECK(recognise_layout({"front_cam", "qpos"}).layout.empty());   // unknown: the caller names keys
}

TEST_CASE("two views are read as views, resized: masks split train from valid", "[datasets]") {
  nexus::test::TempDir dir;
  const std::string path = dir.path + "/two.hdf5";
  const auto f = two_view_file(6, 5);
  write_demo_file(path, f.meta, f.episodes);

  const auto same = read_demo_file(path);
  CHECK(same.meta.views == f.meta.views);
  CHECK(same.meta.image_size == 6);
  CHECK(same.episodes[3].images == f.episodes[3].images);  // [T, V, S, S, 3] in, the same out
  CHECK_FALSE(same.meta.has_masks);
  CHECK(same.episodes[4].train);

  const auto small = read_demo_file(path, {.image_size = 3});
  CHECK(small.meta.image_size == 3);
  CHECK(small.meta.source_image_size == 6);
  REQUIRE(small.episodes[1].images.size() == 2 * 2 * 3 * 3 * 3);
  // Each view resized on its own: view 1 is still view 0's negative, pixel for pixel (within the
  // rounding of an average that ends in .5).
  const auto& img = small.episodes[1].images;
  const std::size_t frame = 3 * 3 * 3;
  for (std::size_t p = 0; p < frame; ++p) CHECK(std::abs(int(img[frame + p]) - (255 - int(img[p]))) <= 1);

  const auto one = read_demo_file(path, {.views = {"robot0_eye_in_hand_image"}});
  CHECK(one.meta.layout == "named");
  CHECK(one.episodes[0].images.size() == 2 * 6 * 6 * 3);
  CHECK(one.episodes[0].images[0] == 255 - f.episodes[0].images[0]);

  put_mask(path, "train", {"demo_0", "demo_1", "demo_3"});
  put_mask(path, "valid", {"demo_4"});
  const auto masked = read_demo_file(path);
  CHECK(masked.meta.has_masks);
  std::vector<int> train, valid;
  for (const auto& e : masked.episodes) {
    train.push_back(e.train);
    valid.push_back(e.valid);
  }
  CHECK(train == std::vector<int>{1, 1, 0, 1, 0});  // demo_2 is in neither split: unused
  CHECK(valid == std::vector<int>{0, 0, 0, 0, 1});

  put_mask(path, "20_percent", {"demo_9"});  // other filter keys are not read
  CHECK_NOTHROW(read_demo_file(path));
}

TEST_CASE("a mask naming a demo the file lacks, or keys it lacks, are refused by name", "[datasets]") {
  nexus::test::TempDir dir;
  const std::string path = dir.path + "/two.hdf5";
  const auto f = two_view_file(4, 2);
  write_demo_file(path, f.meta, f.episodes);
  CHECK_THAT(error_of([&] { read_demo_file(path, {.state_keys = {"robot0_eef_pos"}}); }),
             Catch::Contains("/data/demo_0/obs/robot0_eef_pos: missing state"));
  CHECK_THAT(error_of([&] { read_demo_file(path, {.views = {"a", "b", "a"}}); }), Catch::Contains("named twice"));
  CHECK_THAT(error_of([&] { read_demo_file(path, {.views = {"../data"}}); }), Catch::Contains("not a dataset name"));
  CHECK_THAT(error_of([&] { read_demo_file(path, {.views = {"agentview_image"}, .state_keys = {"agentview_image"}}); }),
             Catch::Contains("both as a view and as state"));
  put_mask(path, "valid", {"demo_7"});
  CHECK_THAT(error_of([&] { read_demo_file(path); }), Catch::Contains("/mask/valid: names 'demo_7'"));

  // A mask of 2^60 strings of 16 bytes: chunked, so the file stays tiny, and its byte count
  // overflows 64 bits. Refused before anything is allocated or read.
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(H5Ldelete(file, "mask/valid", H5P_DEFAULT) >= 0);
  const hsize_t huge = 1ull << 60, one = 1;
  const hid_t space = H5Screate_simple(1, &huge, nullptr), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  REQUIRE(H5Pset_chunk(dcpl, 1, &one) >= 0);
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, 16);
  const hid_t d = H5Dcreate2(file, "mask/valid", type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  REQUIRE(d >= 0);
  H5Dclose(d);
  H5Tclose(type);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(file);
  CHECK_THAT(error_of([&] { read_demo_file(path); }), Catch::Contains("/mask/valid: reading the file would take more than"));
}

TEST_CASE("normalisation: mean and std over the training demos, constant columns only centred", "[datasets]") {
  auto f = two_view_file(2, 3);  // actions rows: (i, -1), (i + 2, 1); state rows (i, 1, 2), (i + 1, 1, 2)
  f.episodes[2].valid = true;    // held out: its values must not count
  f.episodes[2].train = false;
  const auto n = compute_normalizer(f);
  // Action column 0 over episodes 0 and 1: {0, 2, 1, 3}: mean 1.5, population std sqrt(1.25).
  CHECK(n.action.mean[0] == Approx(1.5));
  CHECK(n.action.std[0] == Approx(std::sqrt(1.25)));
  CHECK(n.action.mean[1] == Approx(0.0));  // {-1, 1, -1, 1}
  CHECK(n.action.std[1] == Approx(1.0));
  CHECK(n.state.mean == std::vector<float>{1.0f, 1.0f, 2.0f});  // {0, 1, 1, 2}
  CHECK(n.state.std[0] == Approx(std::sqrt(0.5)));
  CHECK(n.state.std[1] == 1.0f);  // constant: centred, not scaled
  CHECK(n.state.std[2] == 1.0f);

  std::vector<float> rows = {3.0f, 5.0f, 0.0f, -1.0f};  // two action rows
  n.action.normalize(rows.data(), rows.size());
  CHECK(rows[0] == Approx(1.5 / std::sqrt(1.25)));
  CHECK(rows[1] == Approx(5.0));
  n.action.denormalize(rows.data(), rows.size());
  CHECK(rows[0] == Approx(3.0));
  CHECK(rows[2] == Approx(0.0).margin(1e-6));
  CHECK(rows[3] == Approx(-1.0));

  for (auto& e : f.episodes) e.train = false;
  CHECK_THROWS_AS(compute_normalizer(f), DatasetError);
}
