// Reading a demonstration file: which keys (datasets/layouts.hpp), the train/valid masks, and
// each demo's arrays, checked before they are read and resized to the caller's image size.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <map>
#include <set>
#include <sys/stat.h>
#include <cerrno>
#include <cstring>

#include "datasets/file_image.hpp"
#include "datasets/layouts.hpp"
#include "datasets/reader.hpp"
#include "datasets/resize.hpp"

namespace nexus::datasets {
namespace detail {

// env_args is optional: a LIBERO or robomimic file has one without our keys, and a hand-made file
// may have none. Each width it lacks is taken from the first demo instead (see Widths); the task
// falls back to robomimic's "env_name". Present but malformed is an error.
void Reader::parse_env_args(hid_t data, DatasetMeta& meta, Widths& w, FileKeys& keys) const {
  const auto raw = string_attr(data, "/data", "env_args");
  if (!raw) return;
  const auto j = nlohmann::json::parse(*raw, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) fail("/data attribute env_args", "is not a JSON object");
  auto text = [&](const char* key) -> std::optional<std::string> {
    if (!j.contains(key)) return std::nullopt;
    if (!j[key].is_string()) fail("/data attribute env_args", std::string(key) + " is not a string");
    return j[key].get<std::string>();
  };
  // `zero_unknown`: an image size or action width of 0 means "not recorded", as in DatasetMeta.
  auto width = [&](const char* key, bool zero_unknown) -> std::optional<hsize_t> {
    if (!j.contains(key)) return std::nullopt;
    const auto& v = j[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > std::int64_t{kMaxWidth})
      fail("/data attribute env_args", std::string(key) + " is not a width from 0 to " + std::to_string(kMaxWidth));
    const auto n = v.get<hsize_t>();
    return n == 0 && zero_unknown ? std::nullopt : std::optional(n);
  };
  if (auto task = text("task")) meta.task = *task;
  else if (auto env = text("env_name")) meta.task = *env;
  auto key_list = [&](const char* key) {
    std::vector<std::string> out;
    if (!j.contains(key)) return out;
    const auto& v = j[key];
    if (!v.is_array() || v.size() > kMaxKeys)
      fail("/data attribute env_args", std::string(key) + " is not a list of at most " + std::to_string(kMaxKeys) +
                                           " names");
    for (const auto& k : v) {
      if (!k.is_string()) fail("/data attribute env_args", std::string(key) + " holds a value that is not a name");
      out.push_back(k.get<std::string>());
    }
    return out;
  };
  keys.views = key_list("views");
  if (auto camera = text("camera"); camera && keys.views.empty()) keys.views = {*camera};  // files before views
  keys.state_keys = key_list("state_keys");
  w.image_size = width("image_size", true);
  w.action_dim = width("action_dim", true);
  w.state_dim = width("state_dim", false);
  w.sim_state_dim = width("sim_state_dim", false);
}

// LIBERO's instruction for all demos: /data's problem_info JSON, "language_instruction".
std::optional<std::string> Reader::shared_instruction(hid_t data) const {
  const auto raw = string_attr(data, "/data", "problem_info");
  if (!raw) return std::nullopt;
  const auto j = nlohmann::json::parse(*raw, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) fail("/data attribute problem_info", "is not a JSON object");
  if (!j.contains("language_instruction")) return std::nullopt;
  if (!j["language_instruction"].is_string())
    fail("/data attribute problem_info", "language_instruction is not a string");
  return j["language_instruction"].get<std::string>();
}

// Views and state keys: the caller's, else env_args's, else the recognised layout's defaults.
void Reader::choose_keys(hid_t data, const std::string& first_demo, const ReadOptions& options, const FileKeys& file,
                         DatasetMeta& meta) {
  const std::string obs_path = "/data/" + first_demo + "/obs";
  Object demo = child(data, "/data", first_demo, H5I_GROUP);
  Object obs = child(demo.get(), "/data/" + first_demo, "obs", H5I_GROUP);
  if (!obs.valid()) fail(obs_path, "missing (the camera images live there)");
  const auto recognised = recognise_layout(link_names(obs.get(), obs_path));
  const bool named = !options.views.empty() || !options.state_keys.empty();
  meta.layout = named ? "named" : !file.views.empty() ? "nexus" : recognised.layout.empty() ? "unknown" : recognised.layout;
  meta.views = !options.views.empty() ? options.views : !file.views.empty() ? file.views : recognised.views;
  meta.state_keys = !options.state_keys.empty() ? options.state_keys
                    : !file.state_keys.empty()  ? file.state_keys
                                                : recognised.state_keys;
  if (meta.views.empty())
    fail(obs_path, "no camera images of a known layout (robomimic, LIBERO, nexus): name the views");
  for (const auto* keys : {&meta.views, &meta.state_keys}) {
    if (keys->size() > kMaxKeys) fail("/data", "more than " + std::to_string(kMaxKeys) + " views or state keys");
    for (std::size_t i = 0; i < keys->size(); ++i)
      if (!plain_name((*keys)[i]) || std::count(keys->begin(), keys->begin() + static_cast<long>(i), (*keys)[i]))
        fail("/data", "key '" + (*keys)[i] + "' is not a dataset name, or is named twice");
  }
  for (const auto& v : meta.views)
    if (std::count(meta.state_keys.begin(), meta.state_keys.end(), v))
      fail("/data", "key '" + v + "' is named both as a view and as state");
}

// robomimic's /mask/<split>: the names of the demos in each split. Only train and valid are used:
// with /mask/valid, its demos are held out; with /mask/train, only its demos train.
void Reader::read_masks(DemoFile& out) {
  Object mask = child(file_, "", "mask", H5I_GROUP);
  if (!mask.valid()) return;
  std::map<std::string, Episode*> by_name;
  for (auto& e : out.episodes) by_name[e.name] = &e;
  auto listed = [&](const char* split) -> std::optional<std::set<std::string>> {
    const auto a = array(mask.get(), "/mask", split);
    if (!a) return std::nullopt;
    std::set<std::string> names;
    for (auto& n : strings(*a)) {
      if (!by_name.count(n)) fail(a->path, "names '" + n + "', which is not a demo under /data");
      names.insert(std::move(n));
    }
    return names;
  };
  const auto train = listed("train"), valid = listed("valid");
  out.meta.has_masks = train || valid;
  for (auto& e : out.episodes) {
    e.valid = valid && valid->count(e.name);
    e.train = !e.valid && (!train || train->count(e.name));
  }
}

std::string Reader::instruction(hid_t demo, const std::string& path, const std::optional<std::string>& shared,
                                const ReadOptions& options) const {
  if (auto s = string_attr(demo, path, "language_instruction")) return *s;
  if (auto meta = string_attr(demo, path, "ep_meta")) {  // robomimic / robocasa: JSON with "lang"
    const auto j = nlohmann::json::parse(*meta, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) fail(path + " attribute ep_meta", "is not a JSON object");
    if (j.contains("lang")) {
      if (!j["lang"].is_string()) fail(path + " attribute ep_meta", "lang is not a string");
      return j["lang"].get<std::string>();
    }
  }
  if (shared) return *shared;
  if (!options.instruction.empty()) return options.instruction;
  fail(path, "no language_instruction (or ep_meta lang) attribute, /data has no problem_info with one, and no "
             "instruction was given for the file");
}

// Each chosen view, [T, H, H, 3] uint8 with T = e.steps, resized into e.images [T, V, S, S, 3].
void Reader::read_views(hid_t obs, const std::string& obs_path, const DatasetMeta& meta, Widths& w, std::int64_t side,
                        Episode& e) {
  const auto t = static_cast<std::size_t>(e.steps), views = meta.views.size(), s = static_cast<std::size_t>(side);
  charge(obs_path, t * views * s * s * 3);
  e.images.resize(t * views * s * s * 3);
  for (std::size_t v = 0; v < views; ++v) {
    const auto img = array(obs, obs_path, meta.views[v]);
    if (!img) fail(obs_path + "/" + meta.views[v], "missing camera images");
    const auto& d = img->dims;
    auto& known = w.view_sides[v];
    const bool u8 = img->cls == H5T_INTEGER && img->size == 1 && img->sign == H5T_SGN_NONE;
    if (!u8 || d.size() != 4 || d[0] != t || d[3] != 3 || d[1] != d[2] || d[1] == 0 || d[1] > kMaxWidth ||
        (known && d[1] != *known)) {
      const std::string hw = known ? std::to_string(*known) : "H";
      fail(img->path, "expected [" + std::to_string(t) + ", " + hw + ", " + hw + ", 3] uint8, got " + describe(*img));
    }
    known = d[1];
    const auto from = static_cast<std::int64_t>(d[1]);
    // The raw view and resize_rgb's row pass live together for a while, beside what is held.
    peak(img->path, count(d) + static_cast<std::uint64_t>(from) * s * 3 * sizeof(float));
    const auto raw = read_all<std::uint8_t>(*img, H5T_NATIVE_UINT8, Hold::Transient);
    for (std::size_t k = 0; k < t; ++k)
      resize_rgb(&raw[k * static_cast<std::size_t>(from * from * 3)], from, &e.images[(k * views + v) * s * s * 3], side);
  }
}

Episode Reader::read_demo(hid_t data, const std::string& name, const DatasetMeta& meta, Widths& w,
                          const std::optional<std::string>& shared, const ReadOptions& options) {
  const std::string path = "/data/" + name;
  Object demo = child(data, "/data", name, H5I_GROUP);
  Episode e;
  e.name = name;
  // Attributes first: a demo without an instruction fails before its arrays are read.
  e.instruction = instruction(demo.get(), path, shared, options);
  e.success = int_attr(demo.get(), path, "success").value_or(0) != 0;

  // The first view's images fix T for every other array.
  const std::string obs_path = path + "/obs";
  Object obs = child(demo.get(), path, "obs", H5I_GROUP);
  if (!obs.valid()) fail(obs_path, "missing (the camera images live there)");
  const auto first = array(obs.get(), obs_path, meta.views[0]);
  if (!first) fail(obs_path + "/" + meta.views[0], "missing camera images");
  const hsize_t t = first->dims.empty() ? 0 : first->dims[0];
  if (t < 1 || t > kMaxSteps)
    fail(first->path, "has " + std::to_string(t) + " steps, expected 1 to " + std::to_string(kMaxSteps));
  e.steps = static_cast<std::int64_t>(t);
  if (auto n = int_attr(demo.get(), path, "num_samples"); n && *n != e.steps)
    fail(path, "num_samples is " + std::to_string(*n) + " but the arrays have " + std::to_string(t) + " steps");

  const auto actions = array(demo.get(), path, "actions");
  if (!actions) fail(path + "/actions", "missing");
  expect_rows(*actions, t, w.action_dim, 1);
  std::vector<Array> state;
  for (std::size_t k = 0; k < meta.state_keys.size(); ++k) {
    auto a = array(obs.get(), obs_path, meta.state_keys[k]);
    if (!a) fail(obs_path + "/" + meta.state_keys[k], "missing state");
    expect_rows(*a, t, w.state_widths[k], 1);
    state.push_back(std::move(*a));
  }
  hsize_t state_dim = 0;
  for (const auto& width : w.state_widths) state_dim += *width;
  if (w.state_dim && *w.state_dim != state_dim)
    fail(obs_path, "state keys [" + std::to_string(meta.state_keys.size()) + "] are " + std::to_string(state_dim) +
                       " wide, but env_args says state_dim " + std::to_string(*w.state_dim));
  w.state_dim = state_dim;
  const auto states = array(demo.get(), path, "states");
  if (states) expect_rows(*states, t, w.sim_state_dim, 0);
  const auto rewards = array(demo.get(), path, "rewards"), dones = array(demo.get(), path, "dones");
  auto expect_steps = [&](const std::optional<Array>& a, bool enum_ok) {
    if (a && (!(numeric(*a) || (enum_ok && a->cls == H5T_ENUM)) || a->dims != std::vector<hsize_t>{t}))
      fail(a->path, "expected [" + std::to_string(t) + "] numbers, got " + describe(*a));
  };
  expect_steps(rewards, false);
  expect_steps(dones, true);  // h5py writes a numpy bool array as enum {FALSE, TRUE}

  // Every other shape is right: now read (each view is checked as it is read).
  const auto side = options.image_size > 0           ? options.image_size
                    : first->dims.size() == 4 ? static_cast<std::int64_t>(first->dims[1])
                                              : 1;  // read_views refuses that shape
  read_views(obs.get(), obs_path, meta, w, side, e);
  e.actions = read_floats(*actions, Hold::Held);
  charge(obs_path, t * state_dim * sizeof(float));
  e.proprio.assign(t * state_dim, 0.0f);
  for (std::size_t k = 0, column = 0; k < state.size(); column += *w.state_widths[k], ++k) {
    const auto values = read_floats(state[k], Hold::Transient);
    const std::size_t width = *w.state_widths[k];
    for (std::size_t i = 0; i < t; ++i)
      std::copy_n(&values[i * width], width, &e.proprio[i * state_dim + column]);
  }
  if (states) e.sim_states = read_floats(*states, Hold::Held);
  if (!rewards) charge(path, t * sizeof(float));
  e.rewards = rewards ? read_floats(*rewards, Hold::Held) : std::vector<float>(t, 0.0f);
  charge(path, t);
  e.dones.assign(t, 0);
  if (dones) {  // read wide: converting -1 or 256 straight to uint8 would clamp them to 0 or 255
    const auto raw = read_all<std::int64_t>(*dones, H5T_NATIVE_INT64, Hold::Transient);
    for (std::size_t i = 0; i < t; ++i) e.dones[i] = raw[i] != 0;
  }
  return e;
}

DemoFile Reader::read(const ReadOptions& options) {
  if (options.image_size < 0 || static_cast<std::uint64_t>(options.image_size) > kMaxWidth)
    throw DatasetError(name_ + ": image size " + std::to_string(options.image_size) + " asked for");
  if (options.max_bytes > 0) max_bytes_ = std::min(options.max_bytes, kMaxBytes);
  Object data = child(file_, "", "data", H5I_GROUP);
  if (!data.valid()) fail("/data", "missing; not a robomimic or LIBERO demonstration file");
  DemoFile out;
  Widths w;
  FileKeys file_keys;
  parse_env_args(data.get(), out.meta, w, file_keys);
  const auto shared = shared_instruction(data.get());
  const auto names = demo_names(data.get());
  if (names.empty()) fail("/data", "has no demo_<n> groups");
  choose_keys(data.get(), names.front(), options, file_keys, out.meta);
  w.view_sides.assign(out.meta.views.size(), w.image_size);
  w.state_widths.assign(out.meta.state_keys.size(), std::nullopt);
  for (const auto& name : names) {
    out.episodes.push_back(read_demo(data.get(), name, out.meta, w, shared, options));
    if (!w.image_size) w.image_size = w.view_sides[0];
  }
  read_masks(out);
  out.meta.source_image_size = static_cast<std::int64_t>(*w.view_sides[0]);
  out.meta.image_size = options.image_size > 0 ? options.image_size : out.meta.source_image_size;
  out.meta.action_dim = static_cast<std::int64_t>(*w.action_dim);
  out.meta.state_dim = static_cast<std::int64_t>(w.state_dim.value_or(0));
  out.meta.sim_state_dim = static_cast<std::int64_t>(w.sim_state_dim.value_or(0));
  return out;
}

}  // namespace detail

DemoFile read_demo_file(const std::string& path, const ReadOptions& options) {
  detail::quiet_hdf5();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw DatasetError(path + ": cannot open: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw DatasetError(path + ": not a regular file");
  detail::File file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) throw DatasetError(path + ": not an HDF5 file, or damaged" + detail::h5_why());
  return detail::Reader(file.get(), path).read(options);
}

DemoFile read_demo_fd(int fd, const std::string& name, const ReadOptions& options) {
  detail::quiet_hdf5();
  std::vector<unsigned char> image = detail::read_whole(fd, name);
  if (image.empty()) throw DatasetError(name + ": empty, not an HDF5 file");
  detail::ImageBuffer buffer{image.data(), image.size()};
  detail::File file = detail::open_image(buffer);  // declared after `image` and `buffer`: closed before they go
  if (!file.valid()) throw DatasetError(name + ": not an HDF5 file, or damaged" + detail::h5_why());
  return detail::Reader(file.get(), name).read(options);
}

std::vector<std::string> split_keys(const std::string& csv) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= csv.size()) {
    const auto end = std::min(csv.find(',', start), csv.size());
    if (end > start) out.push_back(csv.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace nexus::datasets
