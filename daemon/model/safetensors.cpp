#include "daemon/model/safetensors.hpp"

#include "daemon/state/private_files.hpp"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace nexus::model {

std::size_t safetensors_dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64") return 8;
  if (d == "F32" || d == "I32") return 4;
  if (d == "F16" || d == "BF16") return 2;
  if (d == "U8" || d == "BOOL") return 1;
  return 0;
}

SafeTensorsFile read_safetensors(const std::string& path) {
  auto fail = [&](const std::string& why) -> std::runtime_error {
    return std::runtime_error("safetensors " + path + ": " + why);
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) throw fail("cannot open");
  in.seekg(0, std::ios::end);
  const std::uint64_t file_size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  std::uint64_t header_len = 0;
  if (file_size < 8 || !in.read(reinterpret_cast<char*>(&header_len), 8)) throw fail("shorter than its header length");
  if (header_len > 100u << 20 || header_len > file_size - 8) throw fail("header length past the end of the file");
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw fail("header is not a JSON object");
  const std::uint64_t data_start = 8 + header_len, data_size = file_size - data_start;
  SafeTensorsFile f;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw fail("__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m->is_string()) f.metadata[m.key()] = m->get<std::string>();
      continue;
    }
    const auto& t = *it;
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets") ||
        !t["dtype"].is_string() || !t["shape"].is_array() || !t["data_offsets"].is_array() ||
        t["data_offsets"].size() != 2)
      throw fail("tensor '" + it.key() + "' lacks dtype, shape or data_offsets");
    SafeTensor st;
    st.dtype = t["dtype"].get<std::string>();
    const std::size_t elem = safetensors_dtype_size(st.dtype);
    if (elem == 0) throw fail("tensor '" + it.key() + "' has unknown dtype " + st.dtype);
    std::uint64_t count = 1;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned()) throw fail("tensor '" + it.key() + "' has a bad dimension");
      const auto v = d.get<std::uint64_t>();
      if (v != 0 && count > (1ull << 40) / v) throw fail("tensor '" + it.key() + "' is implausibly large");
      count *= v;
      st.shape.push_back(static_cast<std::int64_t>(v));
    }
    const auto& off = t["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) throw fail("bad data_offsets");
    const auto begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
    if (begin > end || end > data_size || end - begin != count * elem)
      throw fail("tensor '" + it.key() + "' byte range [" + std::to_string(begin) + ", " + std::to_string(end) +
                 ") does not match its shape or the file");
    st.data.resize(end - begin);
    in.seekg(static_cast<std::streamoff>(data_start + begin));
    if (!in.read(reinterpret_cast<char*>(st.data.data()), static_cast<std::streamsize>(st.data.size())))
      throw fail("truncated data for '" + it.key() + "'");
    f.tensors.emplace(it.key(), std::move(st));
  }
  return f;
}

void write_safetensors(const std::string& path, const SafeTensorsFile& f, unsigned mode) {
  nlohmann::json header = nlohmann::json::object();
  if (!f.metadata.empty()) header["__metadata__"] = f.metadata;
  std::uint64_t at = 0;
  for (const auto& [name, t] : f.tensors) {  // std::map: sorted names, deterministic files
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.data.size()}}};
    at += t.data.size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keep the data 8-byte aligned, as the format suggests
  std::string bytes;
  bytes.reserve(8 + h.size() + at);
  const std::uint64_t len = h.size();
  bytes.append(reinterpret_cast<const char*>(&len), 8);
  bytes.append(h);
  for (const auto& [name, t] : f.tensors) bytes.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  daemon::write_private_file(path, bytes, mode);
}

}  // namespace nexus::model
