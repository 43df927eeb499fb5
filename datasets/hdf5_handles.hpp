// libhdf5's C API made safe to use from C++: handles closed on scope exit, the bounds a hostile
// file is held to, and the small helpers the reader and writer share. Internal to datasets/.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace nexus::datasets::detail {

// Bounds checked before allocating anything a hostile file asks for.
constexpr hsize_t kMaxSteps = 100000;                 // T of one demo
constexpr std::uint64_t kMaxBytes = 4ull << 30;       // all arrays of one file, together
constexpr std::uint64_t kMaxImageFile = 8ull << 30;   // a file read whole from an fd
constexpr std::uint64_t kMaxChunkBytes = 256 << 20;   // one chunk of a chunked dataset
constexpr hsize_t kMaxWidth = 1 << 20;                // image side, state, action widths
constexpr hsize_t kMaxLinks = 1000000;                // links listed under /data
constexpr std::size_t kMaxString = 1 << 20;           // a fixed-length string attribute
constexpr std::size_t kMaxKeys = 16;                  // views, or state keys, named for one file
inline const std::string kProprio = "robot0_proprio";  // this project's state key

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
inline void quiet_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

// ": " and the most specific message on this thread's HDF5 error stack, or "" when it is empty.
inline std::string h5_why() {
  std::string out;
  auto innermost = [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
    if (n == 0 && e->desc) *static_cast<std::string*>(data) = e->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, &out);
  return out.empty() ? "" : ": " + out;
}

// A name usable as one link under a group: the camera key is spliced into paths.
inline bool plain_name(const std::string& s) {
  return !s.empty() && s.size() <= 255 && s != "." && s.find('/') == std::string::npos;
}

inline std::string type_name(hid_t t) {
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
inline std::uint64_t count(const std::vector<hsize_t>& dims) {
  std::uint64_t n = 1;
  for (const hsize_t d : dims) {
    if (d != 0 && n > UINT64_MAX / d) return UINT64_MAX;
    n *= d;
  }
  return n;
}

}  // namespace nexus::datasets::detail
