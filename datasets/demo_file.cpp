#include "datasets/demo_file.hpp"

#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

namespace nexus::datasets {
namespace {

// Bounds checked before allocating anything a hostile file asks for.
constexpr hsize_t kMaxSteps = 100000;                 // T of one demo
constexpr std::uint64_t kMaxBytes = 4ull << 30;       // all arrays of one file, together
constexpr std::uint64_t kMaxImageFile = 8ull << 30;   // a file read whole from an fd
constexpr std::uint64_t kMaxChunkBytes = 256 << 20;   // one chunk of a chunked dataset
constexpr hsize_t kMaxWidth = 1 << 20;                // image side, state, action widths
constexpr hsize_t kMaxLinks = 1000000;                // links listed under /data
constexpr std::size_t kMaxString = 1 << 20;           // a fixed-length string attribute
const std::string kProprio = "robot0_proprio";

// An HDF5 identifier closed on scope exit by the close function of its kind, so that an exception
// halfway through a read or write leaks no handle, and a file image's file is closed before its
// buffer is freed.
template <herr_t (*Close)(hid_t)>
class Hid {
 public:
  Hid() = default;
  explicit Hid(hid_t id) : id_(id) {}
  Hid(Hid&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  ~Hid() { reset(); }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }
  void reset() {
    if (id_ >= 0) Close(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};
using File = Hid<H5Fclose>;
using Group = Hid<H5Gclose>;
using Dataset = Hid<H5Dclose>;
using Object = Hid<H5Oclose>;  // a group or dataset opened with H5Oopen
using Attr = Hid<H5Aclose>;
using Space = Hid<H5Sclose>;
using Type = Hid<H5Tclose>;
using Plist = Hid<H5Pclose>;

// HDF5 prints its error stack to stderr by default; here failures only come out as DatasetError.
// The setting is per thread in a thread-safe libhdf5 (Debian's is), hence at every entry point.
void quiet_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

// ": " and the most specific message on this thread's HDF5 error stack, or "" when it is empty.
std::string h5_why() {
  std::string out;
  auto innermost = [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
    if (n == 0 && e->desc) *static_cast<std::string*>(data) = e->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, &out);
  return out.empty() ? "" : ": " + out;
}

// A name usable as one link under a group: the camera key is spliced into paths.
bool plain_name(const std::string& s) {
  return !s.empty() && s.size() <= 255 && s != "." && s.find('/') == std::string::npos;
}

std::string type_name(hid_t t) {
  const std::string bits = std::to_string(8 * H5Tget_size(t));
  switch (H5Tget_class(t)) {
    case H5T_INTEGER: return (H5Tget_sign(t) == H5T_SGN_NONE ? "uint" : "int") + bits;
    case H5T_FLOAT: return "float" + bits;
    case H5T_STRING: return "string";
    case H5T_ENUM: return "enum";
    case H5T_COMPOUND: return "compound";
    default: return "another type";
  }
}

// Element count of a shape read from a file, saturating instead of overflowing.
std::uint64_t count(const std::vector<hsize_t>& dims) {
  std::uint64_t n = 1;
  for (const hsize_t d : dims) {
    if (d != 0 && n > UINT64_MAX / d) return UINT64_MAX;
    n *= d;
  }
  return n;
}

// ---- writing --------------------------------------------------------------------------------

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
    const nlohmann::json env = {{"task", meta.task},           {"camera", meta.camera},
                                {"image_size", meta.image_size}, {"state_dim", meta.state_dim},
                                {"action_dim", meta.action_dim}, {"sim_state_dim", meta.sim_state_dim}};
    // `replace`: a task name that is not UTF-8 must not make dump() throw a json error.
    string_attr(data.get(), "/data", "env_args", env.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));

    const hsize_t s = static_cast<hsize_t>(meta.image_size);
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
      array(obs.get(), where + "/obs", meta.camera.c_str(), H5T_STD_U8LE, H5T_NATIVE_UINT8, {t, s, s, 3},
            e.images.data());
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
  if (!plain_name(meta.camera) || meta.camera == kProprio)
    throw bad("meta: camera '" + meta.camera + "' is not usable as a dataset name under obs/");
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
    expect("images", e.images.size(), s * s * 3, "image_size^2 x 3", false);
    expect("proprio", e.proprio.size(), static_cast<std::size_t>(meta.state_dim), "state_dim", false);
    expect("actions", e.actions.size(), static_cast<std::size_t>(meta.action_dim), "action_dim", false);
    expect("sim_states", e.sim_states.size(), static_cast<std::size_t>(meta.sim_state_dim), "sim_state_dim", false);
    expect("rewards", e.rewards.size(), 1, "1", true);  // empty: written as zeros
    expect("dones", e.dones.size(), 1, "1", true);
  }
}

// ---- reading --------------------------------------------------------------------------------

// One dataset opened for checking: its shape and element type, before any data is read.
struct Array {
  Object dset;
  std::string path;
  std::vector<hsize_t> dims;
  H5T_class_t cls = H5T_NO_CLASS;
  std::size_t size = 0;
  H5T_sign_t sign = H5T_SGN_ERROR;
  std::string type;
};

std::string describe(const Array& a) {
  std::string s = "[";
  for (std::size_t i = 0; i < a.dims.size(); ++i) s += (i ? ", " : "") + std::to_string(a.dims[i]);
  return s + "] " + a.type;
}

bool numeric(const Array& a) { return a.cls == H5T_FLOAT || a.cls == H5T_INTEGER; }

// What the reader knows of the file's widths: from env_args, else from the first demo that has
// the dataset. Once known, every later demo must agree.
struct Widths {
  std::optional<hsize_t> image_size, state_dim, action_dim, sim_state_dim;
};

// `demo_<n>` with n in canonical decimal (no sign, no leading zeros), so numbers are unique.
std::optional<std::uint64_t> demo_number(const std::string& name) {
  if (name.rfind("demo_", 0) != 0) return std::nullopt;
  const std::string digits = name.substr(5);
  if (digits.empty() || digits.size() > 18 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return n;
}

class Reader {
 public:
  Reader(hid_t file, std::string name) : file_(file), name_(std::move(name)) {}
  DemoFile read(const std::string& camera);

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& why) const {
    throw DatasetError(name_ + ": " + where + ": " + why);
  }
  Object child(hid_t loc, const std::string& loc_path, const std::string& name, H5I_type_t kind) const;
  std::optional<Array> array(hid_t loc, const std::string& loc_path, const std::string& name) const;
  struct OpenAttr;  // an attribute with its type and dataspace, opened and checked readable
  std::optional<OpenAttr> open_attr(hid_t obj, const std::string& at, const char* name) const;
  std::optional<std::string> string_attr(hid_t obj, const std::string& where, const char* name) const;
  std::optional<std::int64_t> int_attr(hid_t obj, const std::string& where, const char* name) const;
  void parse_env_args(hid_t data, DatasetMeta& meta, Widths& w) const;
  std::optional<std::string> shared_instruction(hid_t data) const;
  std::vector<std::string> demo_names(hid_t data) const;
  void expect_rows(const Array& a, hsize_t t, std::optional<hsize_t>& width, hsize_t lowest) const;
  template <class T>
  std::vector<T> read_all(const Array& a, hid_t mem_type);
  std::vector<float> read_floats(const Array& a);
  Episode read_demo(hid_t data, const std::string& name, const std::string& camera, Widths& w,
                    const std::optional<std::string>& shared);

  hid_t file_;
  std::string name_;         // the file's path or the fd's name, first in every message
  std::uint64_t bytes_ = 0;  // allocated for arrays so far, at most kMaxBytes
};

// Opens the link `name` under `loc` (whose path is `loc_path`, "" for the root); an invalid handle
// when there is no such link. Only hard links are followed: a soft or external link in a hostile
// file could lead the reader into another file, opened with the daemon's rights, not the tenant's.
Object Reader::child(hid_t loc, const std::string& loc_path, const std::string& name, H5I_type_t kind) const {
  const std::string path = loc_path + "/" + name;
  const htri_t exists = H5Lexists(loc, name.c_str(), H5P_DEFAULT);
  if (exists < 0) fail(path, "unreadable link" + h5_why());
  if (exists == 0) return {};
  H5L_info_t info;
  if (H5Lget_info(loc, name.c_str(), &info, H5P_DEFAULT) < 0) fail(path, "unreadable link" + h5_why());
  if (info.type != H5L_TYPE_HARD) fail(path, "is a soft or external link; only hard links are followed");
  Object o(H5Oopen(loc, name.c_str(), H5P_DEFAULT));
  if (!o.valid()) fail(path, "cannot open" + h5_why());
  if (H5Iget_type(o.get()) != kind) fail(path, kind == H5I_GROUP ? "is not a group" : "is not a dataset");
  return o;
}

std::optional<Array> Reader::array(hid_t loc, const std::string& loc_path, const std::string& name) const {
  Array a;
  a.path = loc_path + "/" + name;
  a.dset = child(loc, loc_path, name, H5I_DATASET);
  if (!a.dset.valid()) return std::nullopt;
  // Raw data kept outside the file (external storage, virtual datasets) would also be read with
  // the daemon's rights: only data inside the file is accepted.
  Plist dcpl(H5Dget_create_plist(a.dset.get()));
  if (!dcpl.valid()) fail(a.path, "unreadable creation properties" + h5_why());
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED && layout != H5D_COMPACT)
    fail(a.path, "is a virtual dataset or has an unknown layout; only data inside the file is read");
  if (H5Pget_external_count(dcpl.get()) != 0) fail(a.path, "keeps its data in external files; refused");
  Type t(H5Dget_type(a.dset.get()));
  Space s(H5Dget_space(a.dset.get()));
  if (!t.valid() || !s.valid()) fail(a.path, "unreadable type or shape" + h5_why());
  a.cls = H5Tget_class(t.get());
  a.size = H5Tget_size(t.get());
  if (a.cls == H5T_INTEGER) a.sign = H5Tget_sign(t.get());
  a.type = type_name(t.get());
  const int rank = H5Sget_simple_extent_ndims(s.get());  // 0 for scalar and null dataspaces
  if (rank < 0 || rank > H5S_MAX_RANK) fail(a.path, "unreadable shape" + h5_why());
  a.dims.resize(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(s.get(), a.dims.data(), nullptr) < 0)
    fail(a.path, "unreadable shape" + h5_why());
  // libhdf5 allocates a whole chunk to read or decompress it, whatever the dataset's size.
  if (layout == H5D_CHUNKED) {
    std::vector<hsize_t> chunk(H5S_MAX_RANK);
    const int chunk_rank = H5Pget_chunk(dcpl.get(), H5S_MAX_RANK, chunk.data());
    chunk.resize(static_cast<std::size_t>(std::max(chunk_rank, 0)));
    if (chunk_rank < 0 || a.size == 0 || count(chunk) > kMaxChunkBytes / a.size)
      fail(a.path, "has chunks over " + std::to_string(kMaxChunkBytes >> 20) + " MiB");
  }
  return a;
}

struct Reader::OpenAttr {
  Attr attr;
  Type type;
  Space space;
};

std::optional<Reader::OpenAttr> Reader::open_attr(hid_t obj, const std::string& at, const char* name) const {
  const htri_t exists = H5Aexists(obj, name);
  if (exists < 0) fail(at, "unreadable" + h5_why());
  if (exists == 0) return std::nullopt;
  Attr a(H5Aopen(obj, name, H5P_DEFAULT));
  Type t(a.valid() ? H5Aget_type(a.get()) : H5I_INVALID_HID);
  Space s(a.valid() ? H5Aget_space(a.get()) : H5I_INVALID_HID);
  if (!t.valid() || !s.valid()) fail(at, "unreadable" + h5_why());
  return OpenAttr{std::move(a), std::move(t), std::move(s)};
}

// An absent attribute is nullopt; one that is there but not a single string is an error.
std::optional<std::string> Reader::string_attr(hid_t obj, const std::string& where, const char* name) const {
  const std::string at = where + " attribute " + name;
  auto opened = open_attr(obj, at, name);
  if (!opened) return std::nullopt;
  const Attr& a = opened->attr;
  const Type& t = opened->type;
  const Space& s = opened->space;
  if (H5Tget_class(t.get()) != H5T_STRING || H5Sget_simple_extent_npoints(s.get()) != 1)
    fail(at, "expected one string, got " + type_name(t.get()));
  if (H5Tis_variable_str(t.get()) > 0) {
    // Same character set in memory as in the file: HDF5 does not convert between them.
    Type mem(H5Tcopy(H5T_C_S1));
    if (!mem.valid() || H5Tset_size(mem.get(), H5T_VARIABLE) < 0 || H5Tset_cset(mem.get(), H5Tget_cset(t.get())) < 0)
      fail(at, "cannot make a string type" + h5_why());
    char* p = nullptr;
    if (H5Aread(a.get(), mem.get(), &p) < 0) fail(at, "unreadable" + h5_why());
    std::string out = p ? p : "";
    H5Dvlen_reclaim(mem.get(), s.get(), H5P_DEFAULT, &p);  // frees what HDF5 allocated for p
    return out;
  }
  // Fixed length (h5py's numpy bytes, or other writers): read as stored, cut at the padding.
  const std::size_t size = H5Tget_size(t.get());
  if (size == 0 || size > kMaxString) fail(at, "string of " + std::to_string(size) + " bytes");
  std::string out(size, '\0');
  if (H5Aread(a.get(), t.get(), out.data()) < 0) fail(at, "unreadable" + h5_why());
  out.resize(::strnlen(out.data(), size));
  if (H5Tget_strpad(t.get()) == H5T_STR_SPACEPAD) out.erase(out.find_last_not_of(' ') + 1);
  return out;
}

std::optional<std::int64_t> Reader::int_attr(hid_t obj, const std::string& where, const char* name) const {
  const std::string at = where + " attribute " + name;
  auto opened = open_attr(obj, at, name);
  if (!opened) return std::nullopt;
  const Attr& a = opened->attr;
  const Type& t = opened->type;
  const Space& s = opened->space;
  // An enum too: h5py stores a numpy bool as enum {FALSE, TRUE}, which libhdf5 converts to int.
  const H5T_class_t cls = H5Tget_class(t.get());
  if ((cls != H5T_INTEGER && cls != H5T_ENUM) || H5Sget_simple_extent_npoints(s.get()) != 1)
    fail(at, "expected one integer, got " + type_name(t.get()));
  std::int64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_INT64, &v) < 0) fail(at, "unreadable" + h5_why());
  return v;
}

// env_args is optional: a LIBERO or robomimic file has one without our keys, and a hand-made file
// may have none. Each width it lacks is taken from the first demo instead (see Widths); the task
// falls back to robomimic's "env_name". Present but malformed is an error.
void Reader::parse_env_args(hid_t data, DatasetMeta& meta, Widths& w) const {
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
  if (auto camera = text("camera")) meta.camera = *camera;
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

// The demo_<n> links under /data, in numeric order (demo_2 before demo_10); others are ignored.
std::vector<std::string> Reader::demo_names(hid_t data) const {
  H5G_info_t info;
  if (H5Gget_info(data, &info) < 0) fail("/data", "unreadable group" + h5_why());
  if (info.nlinks > kMaxLinks) fail("/data", "has " + std::to_string(info.nlinks) + " links, too many");
  std::vector<std::pair<std::uint64_t, std::string>> found;
  // A C callback: nothing may be thrown through libhdf5's frames, so failures return -1.
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
    try {
      if (const auto n = demo_number(name))
        static_cast<std::vector<std::pair<std::uint64_t, std::string>>*>(out)->emplace_back(*n, name);
      return 0;
    } catch (...) {
      return -1;
    }
  };
  hsize_t idx = 0;
  if (H5Literate(data, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, collect, &found) < 0)
    fail("/data", "cannot list its links" + h5_why());
  std::sort(found.begin(), found.end());
  std::vector<std::string> names;
  for (auto& f : found) names.push_back(std::move(f.second));
  return names;
}

// A [T, width] numeric array; an unknown width is learned here, from the first demo that has it.
void Reader::expect_rows(const Array& a, hsize_t t, std::optional<hsize_t>& width, hsize_t lowest) const {
  const bool ok = numeric(a) && a.dims.size() == 2 && a.dims[0] == t && a.dims[1] >= lowest &&
                  a.dims[1] <= kMaxWidth && (!width || a.dims[1] == *width);
  if (!ok)
    fail(a.path, "expected [" + std::to_string(t) + ", " + (width ? std::to_string(*width) : "*") + "] float, got " +
                     describe(a));
  width = a.dims[1];
}

template <class T>
std::vector<T> Reader::read_all(const Array& a, hid_t mem_type) {
  const std::uint64_t n = count(a.dims);
  if (n > (kMaxBytes - bytes_) / sizeof(T))
    fail(a.path, "the file's arrays need more than " + std::to_string(kMaxBytes >> 30) + " GiB of memory");
  bytes_ += n * sizeof(T);
  std::vector<T> v(n);
  // The memory type converts: float64 or integer files come out as float32, as the API promises.
  if (n > 0 && H5Dread(a.dset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    fail(a.path, "cannot read" + h5_why());
  return v;
}

// NaN or infinity would poison training silently, so they count as a damaged file.
std::vector<float> Reader::read_floats(const Array& a) {
  auto v = read_all<float>(a, H5T_NATIVE_FLOAT);
  const std::size_t width = a.dims.size() == 2 ? a.dims[1] : 1;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      fail(a.path, "the value at step " + std::to_string(i / width) +
                       (width > 1 ? ", column " + std::to_string(i % width) : std::string()) + " is not finite");
  return v;
}

Episode Reader::read_demo(hid_t data, const std::string& name, const std::string& camera, Widths& w,
                          const std::optional<std::string>& shared) {
  const std::string path = "/data/" + name;
  Object demo = child(data, "/data", name, H5I_GROUP);
  Episode e;
  // Attributes first: a demo without an instruction fails before its arrays are read.
  if (auto s = string_attr(demo.get(), path, "language_instruction")) e.instruction = *s;
  else if (shared) e.instruction = *shared;
  else fail(path, "no language_instruction attribute, and /data has no problem_info with one");
  e.success = int_attr(demo.get(), path, "success").value_or(0) != 0;

  // The camera's images fix T for every other array.
  const std::string obs_path = path + "/obs";
  Object obs = child(demo.get(), path, "obs", H5I_GROUP);
  if (!obs.valid()) fail(obs_path, "missing (the camera images " + camera + " live there)");
  const auto img = array(obs.get(), obs_path, camera);
  if (!img) fail(obs_path + "/" + camera, "missing camera images");
  const auto& d = img->dims;
  const bool u8 = img->cls == H5T_INTEGER && img->size == 1 && img->sign == H5T_SGN_NONE;
  if (!u8 || d.size() != 4 || d[3] != 3 || d[1] != d[2] || d[1] == 0 || d[1] > kMaxWidth ||
      (w.image_size && d[1] != *w.image_size)) {
    const std::string side = w.image_size ? std::to_string(*w.image_size) : "H";
    fail(img->path, "expected [T, " + side + ", " + side + ", 3] uint8, got " + describe(*img));
  }
  const hsize_t t = d[0];
  if (t < 1 || t > kMaxSteps)
    fail(img->path, "has " + std::to_string(t) + " steps, expected 1 to " + std::to_string(kMaxSteps));
  w.image_size = d[1];
  e.steps = static_cast<std::int64_t>(t);
  if (auto n = int_attr(demo.get(), path, "num_samples"); n && *n != e.steps)
    fail(path, "num_samples is " + std::to_string(*n) + " but the arrays have " + std::to_string(t) + " steps");

  const auto actions = array(demo.get(), path, "actions");
  if (!actions) fail(path + "/actions", "missing");
  expect_rows(*actions, t, w.action_dim, 1);
  const auto proprio = array(obs.get(), obs_path, kProprio);
  if (proprio) {
    expect_rows(*proprio, t, w.state_dim, 0);
  } else if (w.state_dim.value_or(0) != 0) {
    fail(obs_path + "/" + kProprio, "missing, but state_dim is " + std::to_string(*w.state_dim));
  } else {
    w.state_dim = 0;
  }
  const auto states = array(demo.get(), path, "states");
  if (states) expect_rows(*states, t, w.sim_state_dim, 0);
  const auto rewards = array(demo.get(), path, "rewards"), dones = array(demo.get(), path, "dones");
  auto expect_steps = [&](const std::optional<Array>& a, bool enum_ok) {
    if (a && (!(numeric(*a) || (enum_ok && a->cls == H5T_ENUM)) || a->dims != std::vector<hsize_t>{t}))
      fail(a->path, "expected [" + std::to_string(t) + "] numbers, got " + describe(*a));
  };
  expect_steps(rewards, false);
  expect_steps(dones, true);  // h5py writes a numpy bool array as enum {FALSE, TRUE}

  // Every shape is right: now read.
  e.images = read_all<std::uint8_t>(*img, H5T_NATIVE_UINT8);
  e.actions = read_floats(*actions);
  if (proprio) e.proprio = read_floats(*proprio);
  if (states) e.sim_states = read_floats(*states);
  e.rewards = rewards ? read_floats(*rewards) : std::vector<float>(t, 0.0f);
  e.dones.assign(t, 0);
  if (dones) {  // read wide: converting -1 or 256 straight to uint8 would clamp them to 0 or 255
    const auto raw = read_all<std::int64_t>(*dones, H5T_NATIVE_INT64);
    for (std::size_t i = 0; i < t; ++i) e.dones[i] = raw[i] != 0;
  }
  return e;
}

DemoFile Reader::read(const std::string& camera_override) {
  Object data = child(file_, "", "data", H5I_GROUP);
  if (!data.valid()) fail("/data", "missing; not a robomimic or LIBERO demonstration file");
  DemoFile out;
  Widths w;
  parse_env_args(data.get(), out.meta, w);
  if (!camera_override.empty()) out.meta.camera = camera_override;
  if (!plain_name(out.meta.camera)) fail("/data", "camera '" + out.meta.camera + "' is not a dataset name");
  const auto shared = shared_instruction(data.get());
  const auto names = demo_names(data.get());
  if (names.empty()) fail("/data", "has no demo_<n> groups");
  for (const auto& name : names) out.episodes.push_back(read_demo(data.get(), name, out.meta.camera, w, shared));
  // The first demo set image_size and action_dim; the others stay 0 when no demo had them.
  out.meta.image_size = static_cast<std::int64_t>(*w.image_size);
  out.meta.action_dim = static_cast<std::int64_t>(*w.action_dim);
  out.meta.state_dim = static_cast<std::int64_t>(w.state_dim.value_or(0));
  out.meta.sim_state_dim = static_cast<std::int64_t>(w.sim_state_dim.value_or(0));
  return out;
}

// The whole of a regular file, with pread from offset 0 (the fd's own offset is left alone).
// Read rather than mmap'd: a tenant could truncate a mapped file under us, and that is SIGBUS.
std::vector<unsigned char> read_whole(int fd, const std::string& name) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw DatasetError(name + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw DatasetError(name + ": not a regular file");
  if (static_cast<std::uint64_t>(st.st_size) > kMaxImageFile)
    throw DatasetError(name + ": " + std::to_string(st.st_size) + " bytes, more than " +
                       std::to_string(kMaxImageFile >> 30) + " GiB");
  std::vector<unsigned char> buf(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < buf.size()) {
    const ssize_t n = ::pread(fd, buf.data() + got, buf.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw DatasetError(name + ": cannot read: " + std::strerror(errno));
    if (n == 0) break;  // shrunk since fstat: HDF5 judges what there is
    got += static_cast<std::size_t>(n);
  }
  buf.resize(got);
  return buf;
}

// Opening a buffer we own as an HDF5 file, by hand rather than with H5LTopen_file_image(buf,
// size, DONT_COPY | DONT_RELEASE): in libhdf5 before 1.14.4 that leaks its bookkeeping struct on
// every call (HDFGroup/hdf5#827; LeakSanitizer fails the asan suite on it), and it names images
// from an unlocked static counter, while the core driver takes two open images of the same name
// for one file: two tenants' reads at once could share one image.
//
// The callbacks "allocate" and "copy" the image by handing out the buffer itself, so libhdf5
// reads it in place, and "free" it by doing nothing: the caller's vector owns it and outlives the
// file. Opened read-only, the image never grows, so realloc is refused.
struct ImageBuffer {
  void* data;
  std::size_t size;
};

void* image_malloc(std::size_t size, H5FD_file_image_op_t op, void* udata) {
  const auto* b = static_cast<const ImageBuffer*>(udata);
  return op != H5FD_FILE_IMAGE_OP_PROPERTY_LIST_GET && size == b->size ? b->data : nullptr;
}
void* image_memcpy(void* dest, const void* src, std::size_t size, H5FD_file_image_op_t, void* udata) {
  const auto* b = static_cast<const ImageBuffer*>(udata);
  return dest == b->data && src == b->data && size == b->size ? dest : nullptr;
}
void* image_realloc(void*, std::size_t, H5FD_file_image_op_t, void*) { return nullptr; }
herr_t image_free(void*, H5FD_file_image_op_t, void*) { return 0; }
void* udata_copy(void* udata) { return udata; }
herr_t udata_free(void*) { return 0; }

std::atomic<std::uint64_t> image_counter{0};

// `buffer` must outlive the returned file (and every object opened in it).
File open_image(ImageBuffer& buffer) {
  Plist fapl(H5Pcreate(H5P_FILE_ACCESS));
  H5FD_file_image_callbacks_t callbacks = {image_malloc, image_memcpy, image_realloc, image_free,
                                           udata_copy,   udata_free,   &buffer};
  // STRONG: closing the file closes anything still open in it, so nothing reads the buffer later.
  if (!fapl.valid() || H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG) < 0 ||
      H5Pset_fapl_core(fapl.get(), 1 << 20, /*backing_store=*/false) < 0 ||
      H5Pset_file_image_callbacks(fapl.get(), &callbacks) < 0 ||
      H5Pset_file_image(fapl.get(), buffer.data, buffer.size) < 0)
    return File();
  // The name only tells open images apart (no backing store), but the core driver refuses to open
  // an image whose name exists as a file: under /dev/null no name can.
  const std::string name = "/dev/null/nexus-fd-image-" + std::to_string(image_counter++);
  return File(H5Fopen(name.c_str(), H5F_ACC_RDONLY, fapl.get()));
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

DemoFile read_demo_file(const std::string& path, const std::string& camera) {
  quiet_hdf5();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw DatasetError(path + ": cannot open: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw DatasetError(path + ": not a regular file");
  File file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) throw DatasetError(path + ": not an HDF5 file, or damaged" + h5_why());
  return Reader(file.get(), path).read(camera);
}

DemoFile read_demo_fd(int fd, const std::string& name, const std::string& camera) {
  quiet_hdf5();
  std::vector<unsigned char> image = read_whole(fd, name);
  if (image.empty()) throw DatasetError(name + ": empty, not an HDF5 file");
  ImageBuffer buffer{image.data(), image.size()};
  File file = open_image(buffer);  // declared after `image` and `buffer`: closed before they go
  if (!file.valid()) throw DatasetError(name + ": not an HDF5 file, or damaged" + h5_why());
  return Reader(file.get(), name).read(camera);
}

}  // namespace nexus::datasets
