// The checking HDF5 reader behind read_demo_file / read_demo_fd (datasets/demo_file.hpp): every
// object is opened and its shape and type checked against what the layout expects before any data
// is read, within the bounds of hdf5_handles.hpp. Internal to datasets/.
#pragma once
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "datasets/demo_file.hpp"
#include "datasets/hdf5_handles.hpp"

namespace nexus::datasets::detail {

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

inline std::string describe(const Array& a) {
  std::string s = "[";
  for (std::size_t i = 0; i < a.dims.size(); ++i) s += (i ? ", " : "") + std::to_string(a.dims[i]);
  return s + "] " + a.type;
}

inline bool numeric(const Array& a) { return a.cls == H5T_FLOAT || a.cls == H5T_INTEGER; }

// What the reader knows of the file's widths: from env_args, else from the first demo that has
// the dataset. Once known, every later demo must agree.
struct Widths {
  std::optional<hsize_t> image_size, state_dim, action_dim, sim_state_dim;
  std::vector<std::optional<hsize_t>> view_sides, state_widths;  // per chosen key
};

// Keys the file's env_args names (this project's writer records them).
struct FileKeys {
  std::vector<std::string> views, state_keys;
};

// `demo_<n>` with n in canonical decimal (no sign, no leading zeros), so numbers are unique.
std::optional<std::uint64_t> demo_number(const std::string& name);

class Reader {
 public:
  Reader(hid_t file, std::string name) : file_(file), name_(std::move(name)) {}
  DemoFile read(const ReadOptions& options);

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& why) const {
    throw DatasetError(name_ + ": " + where + ": " + why);
  }
  [[noreturn]] void too_large(const std::string& where, const std::string& why) const {
    throw DatasetTooLarge(name_ + ": " + where + ": " + why);
  }
  // reader_core.cpp: opening and checking objects, attributes and arrays.
  Object child(hid_t loc, const std::string& loc_path, const std::string& name, H5I_type_t kind) const;
  std::optional<Array> array(hid_t loc, const std::string& loc_path, const std::string& name) const;
  struct OpenAttr;  // an attribute with its type and dataspace, opened and checked readable
  std::optional<OpenAttr> open_attr(hid_t obj, const std::string& at, const char* name) const;
  std::optional<std::string> string_attr(hid_t obj, const std::string& where, const char* name) const;
  std::optional<std::int64_t> int_attr(hid_t obj, const std::string& where, const char* name) const;
  std::vector<std::string> link_names(hid_t group, const std::string& where) const;
  std::vector<std::string> demo_names(hid_t data) const;
  std::vector<std::string> strings(const Array& a);
  void expect_rows(const Array& a, hsize_t t, std::optional<hsize_t>& width, hsize_t lowest) const;
  // What an array costs: held (it stays in the result) or transient (freed before the next read).
  enum class Hold { Held, Transient };
  template <class T>
  std::vector<T> read_all(const Array& a, hid_t mem_type, Hold hold);
  std::vector<float> read_floats(const Array& a, Hold hold);
  // Counts `bytes` the result will hold against the read's bound, before they are allocated.
  void charge(const std::string& where, std::uint64_t bytes);
  // Checks that `bytes` allocated for a while, beside what is held, stay within the bound.
  void peak(const std::string& where, std::uint64_t bytes) const;

  // demo_reader.cpp: the layout, the masks and each demo.
  void parse_env_args(hid_t data, DatasetMeta& meta, Widths& w, FileKeys& keys) const;
  std::optional<std::string> shared_instruction(hid_t data) const;
  void choose_keys(hid_t data, const std::string& first_demo, const ReadOptions& options, const FileKeys& file,
                   DatasetMeta& meta);
  void read_masks(DemoFile& out);
  std::string instruction(hid_t demo, const std::string& path, const std::optional<std::string>& shared,
                          const ReadOptions& options) const;
  void read_views(hid_t obs, const std::string& obs_path, const DatasetMeta& meta, Widths& w, std::int64_t side,
                  Episode& e);
  Episode read_demo(hid_t data, const std::string& name, const DatasetMeta& meta, Widths& w,
                    const std::optional<std::string>& shared, const ReadOptions& options);

  hid_t file_;
  std::string name_;              // the file's path or the fd's name, first in every message
  std::uint64_t max_bytes_ = kMaxBytes;  // this read's bound (ReadOptions::max_bytes, at most kMaxBytes)
  std::uint64_t bytes_ = 0;       // held by the result so far, at most max_bytes_
};

}  // namespace nexus::datasets::detail
