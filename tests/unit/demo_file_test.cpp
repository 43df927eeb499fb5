#include <catch2/catch.hpp>

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "datasets/demo_file.hpp"
#include "processes.hpp"

using nexus::datasets::DatasetError;
using nexus::datasets::DatasetMeta;
using nexus::datasets::DemoFile;
using nexus::datasets::Episode;
using nexus::datasets::read_demo_fd;
using nexus::datasets::read_demo_file;
using nexus::datasets::write_demo_file;

namespace {

DatasetMeta test_meta() {
  DatasetMeta m;
  m.task = "reach";
  m.image_size = 64;
  m.state_dim = 3;
  m.action_dim = 2;
  m.sim_state_dim = 5;
  return m;
}

// Every array of every episode differs from the others' (seed), so a swapped or shifted read shows.
Episode make_episode(const DatasetMeta& m, std::int64_t steps, int seed) {
  Episode e;
  e.instruction = "reach the target number " + std::to_string(seed);
  e.steps = steps;
  e.success = seed % 2 == 1;
  const auto t = static_cast<std::size_t>(steps);
  e.images.resize(t * static_cast<std::size_t>(m.image_size * m.image_size) * 3);
  for (std::size_t i = 0; i < e.images.size(); ++i) e.images[i] = static_cast<std::uint8_t>(i * 7 + seed);
  auto fill = [&](std::vector<float>& v, std::size_t n, float step) {
    v.resize(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(seed) + step * static_cast<float>(i);
  };
  fill(e.proprio, t * static_cast<std::size_t>(m.state_dim), 0.25f);
  fill(e.actions, t * static_cast<std::size_t>(m.action_dim), -0.5f);
  fill(e.sim_states, t * static_cast<std::size_t>(m.sim_state_dim), 0.125f);
  fill(e.rewards, t, 1.0f);
  e.dones.assign(t, 0);
  e.dones.back() = 1;
  return e;
}

std::vector<Episode> three_episodes(const DatasetMeta& m) {
  return {make_episode(m, 5, 1), make_episode(m, 7, 2), make_episode(m, 9, 3)};
}

void check_same(const DemoFile& got, const DatasetMeta& meta, const std::vector<Episode>& want) {
  CHECK(got.meta.task == meta.task);
  CHECK(got.meta.views == meta.views);
  CHECK(got.meta.image_size == meta.image_size);
  CHECK(got.meta.state_dim == meta.state_dim);
  CHECK(got.meta.action_dim == meta.action_dim);
  CHECK(got.meta.sim_state_dim == meta.sim_state_dim);
  REQUIRE(got.episodes.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("episode " << i);
    const Episode &a = got.episodes[i], &b = want[i];
    CHECK(a.instruction == b.instruction);
    CHECK(a.steps == b.steps);
    CHECK(a.images == b.images);
    CHECK(a.proprio == b.proprio);
    CHECK(a.actions == b.actions);
    CHECK(a.sim_states == b.sim_states);
    CHECK(a.rewards == b.rewards);
    CHECK(a.dones == b.dones);
    CHECK(a.success == b.success);
  }
}

// The DatasetError's message, or a marker that none was thrown (other exceptions fail the test).
// The reader must not leave a file or object open when it throws.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const DatasetError& e) {
    CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0);
    return e.what();
  }
  return "(no DatasetError)";
}

// Stdout and stderr of a shell command, which must succeed.
std::string run(const std::string& command) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  CHECK(::pclose(p) == 0);
  return out;
}

// ---- HDF5 C API helpers: files the writer would refuse to write ----

// Opens a file read-write for `f` to break it.
template <class F>
void edit(const std::string& path, F&& f) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(file >= 0);
  f(file);
  REQUIRE(H5Fclose(file) >= 0);
}

// A dataset at `path` (groups on the way are created); without `data` it holds zeros. With
// `chunk`, it is chunked, gzip-compressed and extendible along T, as robomimic's often are.
void put(hid_t file, const std::string& path, hid_t type, const std::vector<hsize_t>& dims,
         const void* data = nullptr, const std::vector<hsize_t>& chunk = {}) {
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  std::vector<hsize_t> max_dims = dims;
  if (!chunk.empty()) {
    REQUIRE(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()) >= 0);
    REQUIRE(H5Pset_deflate(dcpl, 4) >= 0);
    max_dims[0] = H5S_UNLIMITED;
  }
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), max_dims.data());
  const hid_t d = H5Dcreate2(file, path.c_str(), type, space, lcpl, dcpl, H5P_DEFAULT);
  REQUIRE(d >= 0);
  if (data) REQUIRE(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
  H5Dclose(d);
  H5Sclose(space);
  H5Pclose(dcpl);
  H5Pclose(lcpl);
}

// A fixed-length string attribute (the writer makes variable-length ones, so both kinds are read).
void put_attr(hid_t file, const std::string& object, const char* name, const std::string& value) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size() + 1);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate_by_name(file, object.c_str(), name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(a >= 0);
  REQUIRE(H5Awrite(a, type, value.c_str()) >= 0);
  H5Aclose(a);
  H5Sclose(space);
  H5Tclose(type);
}

// What h5py writes for numpy bools: enum {FALSE = 0, TRUE = 1} over int8.
hid_t bool_enum() {
  const hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
  const std::int8_t no = 0, yes = 1;
  H5Tenum_insert(t, "FALSE", &no);
  H5Tenum_insert(t, "TRUE", &yes);
  return t;
}

void replace(hid_t file, const std::string& path, hid_t type, const std::vector<hsize_t>& dims) {
  REQUIRE(H5Ldelete(file, path.c_str(), H5P_DEFAULT) >= 0);
  put(file, path, type, dims);
}

}  // namespace

TEST_CASE("demo files round-trip every field of every episode", "[datasets]") {
  nexus::test::TempDir dir;
  const std::string path = dir.path + "/demo.hdf5";
  const auto meta = test_meta();
  const auto episodes = three_episodes(meta);
  write_demo_file(path, meta, episodes);
  check_same(read_demo_file(path), meta, episodes);

  SECTION("read from an fd, the result is the same") {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    const auto from_fd = read_demo_fd(fd, "tenant:demo.hdf5");
    ::close(fd);
    check_same(from_fd, meta, episodes);
  }
  SECTION("a writer with no rewards or dones writes zeros; zero widths write no arrays") {
    auto m = meta;
    m.state_dim = 0;
    m.sim_state_dim = 0;
    auto e = make_episode(m, 4, 7);
    e.rewards.clear();
    e.dones.clear();
    write_demo_file(path, m, {e});
    const auto got = read_demo_file(path);
    e.rewards.assign(4, 0.0f);
    e.dones.assign(4, 0);
    check_same(got, m, {e});
  }
  SECTION("the writer names the demo and field whose size disagrees with meta") {
    auto bad = episodes;
    bad[1].actions.pop_back();
    CHECK_THAT(error_of([&] { write_demo_file(path, meta, bad); }),
               Catch::Contains(path) && Catch::Contains("demo_1") && Catch::Contains("actions"));
    bad = episodes;
    bad[2].images.resize(10);
    CHECK_THAT(error_of([&] { write_demo_file(path, meta, bad); }),
               Catch::Contains("demo_2") && Catch::Contains("images"));
    check_same(read_demo_file(path), meta, episodes);  // the refused writes left the file alone
  }
}

TEST_CASE("h5dump sees the robomimic layout", "[datasets]") {
  nexus::test::TempDir dir;
  const std::string path = dir.path + "/demo.hdf5";
  const auto meta = test_meta();
  write_demo_file(path, meta, three_episodes(meta));
  const std::string all = run("h5dump -H '" + path + "'");
  CHECK_THAT(all, Catch::Contains("GROUP \"demo_2\"") && Catch::Contains("ATTRIBUTE \"env_args\"") &&
                      Catch::Contains("ATTRIBUTE \"language_instruction\"") && Catch::Contains("DATASET \"actions\""));
  CHECK_THAT(run("h5dump -H -d /data/demo_0/obs/agentview_image '" + path + "'"),
             Catch::Contains("DATASET \"/data/demo_0/obs/agentview_image\"") && Catch::Contains("H5T_STD_U8LE") &&
                 Catch::Contains("SIMPLE { ( 5, 64, 64, 3 )"));
  CHECK_THAT(run("h5dump -H -d /data/demo_1/actions '" + path + "'"),
             Catch::Contains("H5T_IEEE_F32LE") && Catch::Contains("SIMPLE { ( 7, 2 )"));
  CHECK_THAT(run("h5dump -a /data/demo_0/language_instruction '" + path + "'"),
             Catch::Contains("H5T_STRING") && Catch::Contains("\"reach the target number 1\""));
  CHECK_THAT(run("h5dump -a /data/total '" + path + "'"), Catch::Contains("(0): 21"));
}

TEST_CASE("a LIBERO-style file: instruction from problem_info, widths from the data", "[datasets]") {
  nexus::test::TempDir dir;
  const std::string path = dir.path + "/libero.hdf5";
  const bool with_env_args = GENERATE(true, false);
  INFO("env_args present: " << with_env_args);
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(file >= 0);
  // demo_10 and demo_2: read in numeric order, not name order; "mask" is not a demo.
  std::vector<double> actions10(4 * 7), actions2(3 * 7);
  for (std::size_t i = 0; i < actions10.size(); ++i) actions10[i] = 0.1 * static_cast<double>(i);
  for (std::size_t i = 0; i < actions2.size(); ++i) actions2[i] = -1.5 + static_cast<double>(i);
  std::vector<std::uint8_t> images10(4 * 8 * 8 * 3), images2(3 * 8 * 8 * 3, 2);
  for (std::size_t i = 0; i < images10.size(); ++i) images10[i] = static_cast<std::uint8_t>(i % 251);
  const std::vector<std::int64_t> dones2 = {0, 0, 1};
  put(file, "/data/demo_10/obs/agentview_rgb", H5T_STD_U8LE, {4, 8, 8, 3}, images10.data(), {1, 8, 8, 3});
  put(file, "/data/demo_10/actions", H5T_IEEE_F64LE, {4, 7}, actions10.data());
  put(file, "/data/demo_2/obs/agentview_rgb", H5T_STD_U8LE, {3, 8, 8, 3}, images2.data());
  put(file, "/data/demo_2/actions", H5T_IEEE_F64LE, {3, 7}, actions2.data());
  put(file, "/data/demo_2/dones", H5T_STD_I64LE, {3}, dones2.data());
  const hid_t bools = bool_enum();
  const std::vector<std::int8_t> dones10 = {0, 0, 0, 1}, yes = {1};
  put(file, "/data/demo_10/dones", bools, {4}, dones10.data());
  const hid_t scalar = H5Screate(H5S_SCALAR);
  const hid_t success = H5Acreate_by_name(file, "/data/demo_10", "success", bools, scalar, H5P_DEFAULT, H5P_DEFAULT,
                                          H5P_DEFAULT);
  REQUIRE(H5Awrite(success, bools, yes.data()) >= 0);
  H5Aclose(success);
  H5Sclose(scalar);
  H5Tclose(bools);
  put(file, "/data/mask/valid", H5T_STD_U8LE, {1});
  put_attr(file, "/data", "problem_info",
           R"({"problem_name": "libero_kitchen_scene1", "language_instruction": "open the top drawer"})");
  if (with_env_args)  // LIBERO's env_args: none of our keys
    put_attr(file, "/data", "env_args", R"({"type": 1, "env_name": "Libero_Kitchen", "env_kwargs": {}})");
  REQUIRE(H5Fclose(file) >= 0);

  const auto got = read_demo_file(path, {.views = {"agentview_rgb"}});
  CHECK(got.meta.task == (with_env_args ? "Libero_Kitchen" : ""));
  CHECK(got.meta.views == std::vector<std::string>{"agentview_rgb"});
  CHECK(got.meta.layout == "named");
  CHECK(got.meta.image_size == 8);
  CHECK(got.meta.action_dim == 7);
  CHECK(got.meta.state_dim == 0);
  CHECK(got.meta.sim_state_dim == 0);
  REQUIRE(got.episodes.size() == 2);
  const Episode &a = got.episodes[0], &b = got.episodes[1];
  CHECK(a.instruction == "open the top drawer");
  CHECK(b.instruction == "open the top drawer");
  CHECK(a.steps == 3);
  CHECK(b.steps == 4);
  CHECK(a.images == images2);
  CHECK(b.images == images10);
  CHECK(a.actions == std::vector<float>(actions2.begin(), actions2.end()));  // float64 converted
  CHECK(b.actions == std::vector<float>(actions10.begin(), actions10.end()));
  CHECK(a.dones == std::vector<std::uint8_t>{0, 0, 1});
  CHECK(b.dones == std::vector<std::uint8_t>{0, 0, 0, 1});  // from h5py-style bools
  CHECK_FALSE(a.success);
  CHECK(b.success);
  CHECK(a.rewards == std::vector<float>(3, 0.0f));  // absent: zeros
  CHECK(a.proprio.empty());
  CHECK(a.sim_states.empty());
}

TEST_CASE("bad demo files are refused with the file and the path inside it named", "[datasets]") {
  nexus::test::TempDir dir;
  const std::string path = dir.path + "/demo.hdf5";
  const auto meta = test_meta();
  write_demo_file(path, meta, three_episodes(meta));
  auto error = [&](const std::string& camera = "") {
    nexus::datasets::ReadOptions o;
    if (!camera.empty()) o.views = {camera};
    return error_of([&] { read_demo_file(path, o); });
  };

  SECTION("not HDF5 at all") {
    std::ofstream(path, std::ios::trunc) << "this is not an HDF5 file, only text\n";
    CHECK_THAT(error(), Catch::Contains(path) && Catch::Contains("not an HDF5 file"));
  }
  SECTION("no such file") {
    CHECK_THAT(error_of([&] { read_demo_file(dir.path + "/absent.hdf5"); }), Catch::Contains("absent.hdf5"));
  }
  SECTION("no /data") {
    edit(path, [](hid_t f) { REQUIRE(H5Ldelete(f, "/data", H5P_DEFAULT) >= 0); });
    CHECK_THAT(error(), Catch::Contains(path + ": /data: missing"));
  }
  SECTION("no actions in one demo") {
    edit(path, [](hid_t f) { REQUIRE(H5Ldelete(f, "/data/demo_1/actions", H5P_DEFAULT) >= 0); });
    CHECK_THAT(error(), Catch::Contains(path + ": /data/demo_1/actions: missing"));
  }
  SECTION("actions of the wrong width") {
    edit(path, [](hid_t f) { replace(f, "/data/demo_1/actions", H5T_IEEE_F32LE, {7, 3}); });
    CHECK_THAT(error(), Catch::Contains("/data/demo_1/actions: expected [7, 2] float, got [7, 3] float32"));
  }
  SECTION("images of the wrong size") {
    edit(path, [](hid_t f) { replace(f, "/data/demo_2/obs/agentview_image", H5T_STD_U8LE, {9, 32, 32, 3}); });
    CHECK_THAT(error(), Catch::Contains("/data/demo_2/obs/agentview_image: expected [9, 64, 64, 3] uint8"));
  }
  SECTION("images of a type other than uint8") {
    edit(path, [](hid_t f) { replace(f, "/data/demo_0/obs/agentview_image", H5T_IEEE_F32LE, {5, 64, 64, 3}); });
    CHECK_THAT(error(), Catch::Contains("/data/demo_0/obs/agentview_image") && Catch::Contains("float32"));
  }
  SECTION("images and actions of different lengths") {
    edit(path, [](hid_t f) { replace(f, "/data/demo_0/actions", H5T_IEEE_F32LE, {4, 2}); });
    CHECK_THAT(error(), Catch::Contains("/data/demo_0/actions: expected [5, 2] float, got [4, 2]"));
  }
  SECTION("no instruction in the demo or in problem_info") {
    edit(path, [](hid_t f) {
      REQUIRE(H5Adelete_by_name(f, "/data/demo_1", "language_instruction", H5P_DEFAULT) >= 0);
    });
    CHECK_THAT(error(), Catch::Contains("/data/demo_1: no language_instruction"));
  }
  SECTION("env_args that is not JSON") {
    edit(path, [](hid_t f) {
      REQUIRE(H5Adelete_by_name(f, "/data", "env_args", H5P_DEFAULT) >= 0);
      put_attr(f, "/data", "env_args", "{not json");
    });
    CHECK_THAT(error(), Catch::Contains("/data attribute env_args"));
  }
  SECTION("a NaN among the actions") {
    edit(path, [](hid_t f) {
      REQUIRE(H5Ldelete(f, "/data/demo_2/actions", H5P_DEFAULT) >= 0);
      std::vector<float> actions(9 * 2, 0.5f);
      actions[3 * 2 + 1] = std::nanf("");
      put(f, "/data/demo_2/actions", H5T_IEEE_F32LE, {9, 2}, actions.data());
    });
    CHECK_THAT(error(), Catch::Contains("/data/demo_2/actions: the value at step 3, column 1 is not finite"));
  }
  SECTION("chunks too large to read safely") {
    edit(path, [](hid_t f) {
      REQUIRE(H5Ldelete(f, "/data/demo_0/actions", H5P_DEFAULT) >= 0);
      put(f, "/data/demo_0/actions", H5T_IEEE_F32LE, {5, 2}, nullptr, {1 << 26, 2});
    });
    CHECK_THAT(error(), Catch::Contains("/data/demo_0/actions: has chunks over"));
  }
  SECTION("a camera key that no demo has") {
    CHECK_THAT(error("wrist_image"), Catch::Contains("/data/demo_0/obs/wrist_image: missing"));
  }
  SECTION("links out of the file are not followed") {
    const std::string other = dir.path + "/other.hdf5";
    write_demo_file(other, meta, three_episodes(meta));
    edit(path, [&](hid_t f) {
      REQUIRE(H5Lcreate_external(other.c_str(), "/data/demo_0", f, "/data/demo_3", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    });
    CHECK_THAT(error(), Catch::Contains("/data/demo_3: is a soft or external link"));
  }
  SECTION("raw data kept in another file is refused") {
    edit(path, [&](hid_t f) {
      REQUIRE(H5Ldelete(f, "/data/demo_0/actions", H5P_DEFAULT) >= 0);
      const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      REQUIRE(H5Pset_external(dcpl, "/etc/hostname", 0, 5 * 2 * 4) >= 0);
      const hsize_t dims[2] = {5, 2};
      const hid_t space = H5Screate_simple(2, dims, nullptr);
      const hid_t d = H5Dcreate2(f, "/data/demo_0/actions", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
      REQUIRE(d >= 0);
      H5Dclose(d);
      H5Sclose(space);
      H5Pclose(dcpl);
    });
    CHECK_THAT(error(), Catch::Contains("/data/demo_0/actions: keeps its data in external files"));
  }
  SECTION("read_demo_fd names the fd's name") {
    edit(path, [](hid_t f) { REQUIRE(H5Ldelete(f, "/data/demo_1/actions", H5P_DEFAULT) >= 0); });
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    CHECK_THAT(error_of([&] { read_demo_fd(fd, "tenant.hdf5"); }),
               Catch::Contains("tenant.hdf5: /data/demo_1/actions: missing"));
    ::close(fd);
    CHECK_THAT(error_of([&] { read_demo_fd(fd, "closed.hdf5"); }), Catch::Contains("closed.hdf5"));
    CHECK_THAT(error_of([&] { read_demo_fd(-1, "minus-one.hdf5"); }), Catch::Contains("minus-one.hdf5"));
    std::ofstream(path, std::ios::trunc) << "garbage";
    const int garbage = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(garbage >= 0);
    CHECK_THAT(error_of([&] { read_demo_fd(garbage, "garbage.hdf5"); }), Catch::Contains("garbage.hdf5: not an HDF5"));
    ::close(garbage);
  }
}
