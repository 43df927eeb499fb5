// Writing demonstration files in this project's layout (datasets/demo_file.hpp): what
// `nexusctl dataset record` produces from the built-in tasks' experts.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "datasets/demo_file.hpp"
#include "datasets/hdf5_handles.hpp"

namespace nexus::datasets {
namespace {
using namespace detail;

struct Writer {
  std::string path;

  [[noreturn]] void fail(const std::string& where, const std::string& why) const {
    throw DatasetError(path + ": " + where + ": " + why + h5_why());
  }

  void string_attr(hid_t obj, const std::string& where, const char* name, const std::string& value) const {
    // Scalar variable-length UTF-8: what h5py writes for a Python str, so h5py reads a str back.
    Type t(H5Tcopy(H5T_C_S1));
    if (!t.valid() || H5Tset_size(t.get(), H5T_VARIABLE) < 0 || H5Tset_cset(t.get(), H5T_CSET_UTF8) < 0)
      fail(where, "cannot make a string type");
    Space s(H5Screate(H5S_SCALAR));
    Attr a(H5Acreate2(obj, name, t.get(), s.get(), H5P_DEFAULT, H5P_DEFAULT));
    const char* p = value.c_str();
    if (!a.valid() || H5Awrite(a.get(), t.get(), &p) < 0) fail(where, std::string("cannot write attribute ") + name);
  }

  void int_attr(hid_t obj, const std::string& where, const char* name, std::int64_t value) const {
    Space s(H5Screate(H5S_SCALAR));
    Attr a(H5Acreate2(obj, name, H5T_STD_I64LE, s.get(), H5P_DEFAULT, H5P_DEFAULT));
    if (!a.valid() || H5Awrite(a.get(), H5T_NATIVE_INT64, &value) < 0)
      fail(where, std::string("cannot write attribute ") + name);
  }

  // Contiguous and uncompressed: the files are small and read whole.
  void array(hid_t loc, const std::string& where, const char* name, hid_t file_type, hid_t mem_type,
             const std::vector<hsize_t>& dims, const void* data) const {
    Space s(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
    Dataset d(H5Dcreate2(loc, name, file_type, s.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!d.valid() || H5Dwrite(d.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
      fail(where + "/" + name, "cannot write");
  }

  void contents(hid_t file, const DatasetMeta& meta, const std::vector<Episode>& episodes) const {
    Group data(H5Gcreate2(file, "data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!data.valid()) fail("/data", "cannot create");
    std::int64_t total = 0;
    for (const auto& e : episodes) total += e.steps;
    int_attr(data.get(), "/data", "total", total);
    nlohmann::json env = {{"task", meta.task},           {"views", meta.views},
                          {"image_size", meta.image_size}, {"state_dim", meta.state_dim},
                          {"action_dim", meta.action_dim}, {"sim_state_dim", meta.sim_state_dim}};
    if (meta.state_dim > 0) env["state_keys"] = {kProprio};
    // `replace`: a task name that is not UTF-8 must not make dump() throw a json error.
    string_attr(data.get(), "/data", "env_args", env.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));

    const hsize_t s = static_cast<hsize_t>(meta.image_size);
    const std::size_t views = meta.views.size(), frame = static_cast<std::size_t>(s * s * 3);
    std::vector<std::uint8_t> one_view;
    for (std::size_t i = 0; i < episodes.size(); ++i) {
      const Episode& e = episodes[i];
      const std::string name = "demo_" + std::to_string(i), where = "/data/" + name;
      const hsize_t t = static_cast<hsize_t>(e.steps);
      Group demo(H5Gcreate2(data.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      if (!demo.valid()) fail(where, "cannot create");
      int_attr(demo.get(), where, "num_samples", e.steps);
      int_attr(demo.get(), where, "success", e.success ? 1 : 0);
      string_attr(demo.get(), where, "language_instruction", e.instruction);
      Group obs(H5Gcreate2(demo.get(), "obs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      if (!obs.valid()) fail(where + "/obs", "cannot create");
      // [T, V, S, S, 3] in memory, one [T, S, S, 3] dataset per view in the file.
      one_view.resize(static_cast<std::size_t>(t) * frame);
      for (std::size_t v = 0; v < views; ++v) {
        for (std::size_t k = 0; k < t; ++k)
          std::memcpy(&one_view[k * frame], &e.images[(k * views + v) * frame], frame);
        array(obs.get(), where + "/obs", meta.views[v].c_str(), H5T_STD_U8LE, H5T_NATIVE_UINT8, {t, s, s, 3},
              one_view.data());
      }
      // Zero-width arrays are left out; the reader takes a missing one as width 0.
      if (meta.state_dim > 0)
        array(obs.get(), where + "/obs", kProprio.c_str(), H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
              {t, static_cast<hsize_t>(meta.state_dim)}, e.proprio.data());
      array(demo.get(), where, "actions", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {t, static_cast<hsize_t>(meta.action_dim)},
            e.actions.data());
      if (meta.sim_state_dim > 0)
        array(demo.get(), where, "states", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
              {t, static_cast<hsize_t>(meta.sim_state_dim)}, e.sim_states.data());
      const std::vector<float> no_rewards(e.rewards.empty() ? t : 0, 0.0f);
      const std::vector<std::uint8_t> no_dones(e.dones.empty() ? t : 0, 0);
      array(demo.get(), where, "rewards", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {t},
            e.rewards.empty() ? no_rewards.data() : e.rewards.data());
      array(demo.get(), where, "dones", H5T_STD_U8LE, H5T_NATIVE_UINT8, {t},
            e.dones.empty() ? no_dones.data() : e.dones.data());
    }
  }
};

// Refuses what the reader would refuse, so every file written here reads back.
void check_for_writing(const std::string& path, const DatasetMeta& meta, const std::vector<Episode>& episodes) {
  auto bad = [&](const std::string& why) { return DatasetError(path + ": " + why); };
  auto width_ok = [](std::int64_t v, std::int64_t lowest) {
    return v >= lowest && static_cast<std::uint64_t>(v) <= kMaxWidth;
  };
  if (!width_ok(meta.image_size, 1) || !width_ok(meta.action_dim, 1) || !width_ok(meta.state_dim, 0) ||
      !width_ok(meta.sim_state_dim, 0))
    throw bad("meta: image_size and action_dim must be 1 to " + std::to_string(kMaxWidth) +
              ", state_dim and sim_state_dim 0 to the same");
  if (meta.views.empty() || meta.views.size() > kMaxKeys)
    throw bad("meta: 1 to " + std::to_string(kMaxKeys) + " views, got " + std::to_string(meta.views.size()));
  for (std::size_t v = 0; v < meta.views.size(); ++v) {
    const auto& view = meta.views[v];
    if (!plain_name(view) || view == kProprio || std::count(meta.views.begin(), meta.views.begin() + v, view))
      throw bad("meta: camera '" + view + "' is not usable as a dataset name under obs/");
  }
  for (std::size_t i = 0; i < episodes.size(); ++i) {
    const Episode& e = episodes[i];
    const std::string demo = "demo_" + std::to_string(i);
    if (e.steps < 1 || static_cast<std::uint64_t>(e.steps) > kMaxSteps)
      throw bad(demo + ": steps is " + std::to_string(e.steps) + ", expected 1 to " + std::to_string(kMaxSteps));
    const auto t = static_cast<std::size_t>(e.steps);
    auto expect = [&](const char* field, std::size_t got, std::size_t width, const std::string& width_name,
                      bool may_be_empty) {
      if (got == t * width || (may_be_empty && got == 0)) return;
      throw bad(demo + ": " + field + " has " + std::to_string(got) + " values, expected T x " + width_name + " = " +
                std::to_string(t) + " x " + std::to_string(width));
    };
    const auto s = static_cast<std::size_t>(meta.image_size);
    expect("images", e.images.size(), meta.views.size() * s * s * 3, "views x image_size^2 x 3", false);
    expect("proprio", e.proprio.size(), static_cast<std::size_t>(meta.state_dim), "state_dim", false);
    expect("actions", e.actions.size(), static_cast<std::size_t>(meta.action_dim), "action_dim", false);
    expect("sim_states", e.sim_states.size(), static_cast<std::size_t>(meta.sim_state_dim), "sim_state_dim", false);
    expect("rewards", e.rewards.size(), 1, "1", true);  // empty: written as zeros
    expect("dones", e.dones.size(), 1, "1", true);
  }
}

}  // namespace

void write_demo_file(const std::string& path, const DatasetMeta& meta, const std::vector<Episode>& episodes) {
  check_for_writing(path, meta, episodes);
  quiet_hdf5();
  // Written beside the target and renamed into place: a reader never sees half a file.
  const std::string tmp = path + ".tmp";
  try {
    File file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!file.valid()) throw DatasetError(path + ": cannot create " + tmp + h5_why());
    Writer{path}.contents(file.get(), meta, episodes);
    if (H5Fclose(file.release()) < 0) throw DatasetError(path + ": cannot finish " + tmp + h5_why());
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw DatasetError(path + ": cannot move " + tmp + " into place: " + std::strerror(err));
  }
}

}  // namespace nexus::datasets
