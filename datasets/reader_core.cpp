#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "datasets/reader.hpp"

namespace nexus::datasets::detail {

std::optional<std::uint64_t> demo_number(const std::string& name) {
  if (name.rfind("demo_", 0) != 0) return std::nullopt;
  const std::string digits = name.substr(5);
  if (digits.empty() || digits.size() > 18 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return n;
}

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

namespace {

// A variable-length string type in memory with the file type's character set (HDF5 does not
// convert between them); invalid on failure.
Type variable_string_type(hid_t file_type) {
  Type mem(H5Tcopy(H5T_C_S1));
  if (!mem.valid() || H5Tset_size(mem.get(), H5T_VARIABLE) < 0 || H5Tset_cset(mem.get(), H5Tget_cset(file_type)) < 0)
    return Type();
  return mem;
}

// One fixed-length string as stored (h5py's numpy bytes, or other writers), cut at its padding.
std::string fixed_string(const char* p, std::size_t size, hid_t file_type) {
  std::string s(p, ::strnlen(p, size));
  if (H5Tget_strpad(file_type) == H5T_STR_SPACEPAD) s.erase(s.find_last_not_of(' ') + 1);
  return s;
}

}  // namespace

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
    Type mem = variable_string_type(t.get());
    if (!mem.valid()) fail(at, "cannot make a string type" + h5_why());
    char* p = nullptr;
    if (H5Aread(a.get(), mem.get(), &p) < 0) fail(at, "unreadable" + h5_why());
    std::string out = p ? p : "";
    H5Dvlen_reclaim(mem.get(), s.get(), H5P_DEFAULT, &p);  // frees what HDF5 allocated for p
    return out;
  }
  // Fixed length (h5py's numpy bytes, or other writers): read as stored, cut at the padding.
  const std::size_t size = H5Tget_size(t.get());
  if (size == 0 || size > kMaxString) fail(at, "string of " + std::to_string(size) + " bytes");
  std::string raw(size, '\0');
  if (H5Aread(a.get(), t.get(), raw.data()) < 0) fail(at, "unreadable" + h5_why());
  return fixed_string(raw.data(), size, t.get());
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

// The names of the links under `group` (at most kMaxLinks), in libhdf5's name order.
std::vector<std::string> Reader::link_names(hid_t group, const std::string& where) const {
  H5G_info_t info;
  if (H5Gget_info(group, &info) < 0) fail(where, "unreadable group" + h5_why());
  if (info.nlinks > kMaxLinks) fail(where, "has " + std::to_string(info.nlinks) + " links, too many");
  std::vector<std::string> names;
  // A C callback: nothing may be thrown through libhdf5's frames, so failures return -1.
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
    try {
      static_cast<std::vector<std::string>*>(out)->emplace_back(name);
      return 0;
    } catch (...) {
      return -1;
    }
  };
  hsize_t idx = 0;
  if (H5Literate(group, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, collect, &names) < 0)
    fail(where, "cannot list its links" + h5_why());
  return names;
}

// The demo_<n> links under /data, in numeric order (demo_2 before demo_10); others are ignored.
std::vector<std::string> Reader::demo_names(hid_t data) const {
  std::vector<std::pair<std::uint64_t, std::string>> found;
  for (auto& name : link_names(data, "/data"))
    if (const auto n = demo_number(name)) found.emplace_back(*n, std::move(name));
  std::sort(found.begin(), found.end());
  std::vector<std::string> names;
  for (auto& f : found) names.push_back(std::move(f.second));
  return names;
}

// A 1-D array of strings, fixed-length (numpy bytes, as robomimic writes its masks) or
// variable-length (h5py's str), each at most kMaxString bytes.
std::vector<std::string> Reader::strings(const Array& a) {
  if (a.cls != H5T_STRING || a.dims.size() != 1) fail(a.path, "expected a list of strings, got " + describe(a));
  const hsize_t n = a.dims[0];
  Type t(H5Dget_type(a.dset.get()));
  if (!t.valid()) fail(a.path, "unreadable type" + h5_why());
  std::vector<std::string> out;
  if (H5Tis_variable_str(t.get()) > 0) {
    if (n > kMaxBytes / sizeof(char*)) peak(a.path, kMaxBytes + 1);  // fails: the product would overflow
    peak(a.path, n * sizeof(char*));  // the strings themselves: at most the file's size, which was bounded
    Type mem = variable_string_type(t.get());
    if (!mem.valid()) fail(a.path, "cannot make a string type" + h5_why());
    std::vector<char*> p(n, nullptr);
    if (n > 0 && H5Dread(a.dset.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data()) < 0)
      fail(a.path, "unreadable" + h5_why());
    for (const char* s : p) out.emplace_back(s ? std::string(s, ::strnlen(s, kMaxString)) : std::string());
    Space s(H5Dget_space(a.dset.get()));
    H5Dvlen_reclaim(mem.get(), s.get(), H5P_DEFAULT, p.data());  // frees what HDF5 allocated
    return out;
  }
  const std::size_t size = a.size;
  if (size == 0 || size > kMaxString) fail(a.path, "strings of " + std::to_string(size) + " bytes");
  if (n > kMaxBytes / size) peak(a.path, kMaxBytes + 1);  // fails: n * size would overflow
  peak(a.path, n * size);
  std::string raw(n * size, '\0');
  if (n > 0 && H5Dread(a.dset.get(), t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) < 0)
    fail(a.path, "unreadable" + h5_why());
  for (hsize_t i = 0; i < n; ++i) out.push_back(fixed_string(raw.data() + i * size, size, t.get()));
  return out;
}

namespace {
std::string mib(std::uint64_t b) { return std::to_string(b >> 20) + " MiB"; }
}  // namespace

void Reader::charge(const std::string& where, std::uint64_t bytes) {
  peak(where, bytes);
  bytes_ += bytes;
}

void Reader::peak(const std::string& where, std::uint64_t bytes) const {
  if (bytes > max_bytes_ - bytes_)
    too_large(where, "reading the file would take more than " + mib(max_bytes_) + " of memory (" + mib(bytes_) +
                    " held so far; the bound is what is left of this dataset quota, at most " + mib(kMaxBytes) + ")");
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
std::vector<T> Reader::read_all(const Array& a, hid_t mem_type, Hold hold) {
  const std::uint64_t n = count(a.dims);
  if (n > kMaxBytes / sizeof(T)) peak(a.path, kMaxBytes + 1);  // fails: n * sizeof(T) would overflow
  if (hold == Hold::Held) charge(a.path, n * sizeof(T));
  else peak(a.path, n * sizeof(T));
  std::vector<T> v(n);
  // The memory type converts: float64 or integer files come out as float32, as the API promises.
  if (n > 0 && H5Dread(a.dset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    fail(a.path, "cannot read" + h5_why());
  return v;
}

// NaN or infinity would poison training silently, so they count as a damaged file.
std::vector<float> Reader::read_floats(const Array& a, Hold hold) {
  auto v = read_all<float>(a, H5T_NATIVE_FLOAT, hold);
  const std::size_t width = a.dims.size() == 2 ? a.dims[1] : 1;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      fail(a.path, "the value at step " + std::to_string(i / width) +
                       (width > 1 ? ", column " + std::to_string(i % width) : std::string()) + " is not finite");
  return v;
}

// The element types read_all is used with (it is defined here, called from demo_reader.cpp too).
template std::vector<std::uint8_t> Reader::read_all<std::uint8_t>(const Array&, hid_t, Hold);
template std::vector<std::int64_t> Reader::read_all<std::int64_t>(const Array&, hid_t, Hold);

}  // namespace nexus::datasets::detail
