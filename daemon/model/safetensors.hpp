// safetensors files (the format of Hugging Face's `safetensors`): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then the raw bytes.
// Written by hand: Debian packages no C++ reader, the format is ~100 lines, and we must validate
// every offset ourselves anyway (a weights file is input like any other).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nexus::model {

struct SafeTensor {
  std::string dtype;                 // "F32", "F16", "BF16", "F64", "I64", "I32", "U8", "BOOL"
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> data;    // little-endian, row-major
};

struct SafeTensorsFile {
  std::map<std::string, std::string> metadata;
  std::map<std::string, SafeTensor> tensors;
};

std::size_t safetensors_dtype_size(const std::string& dtype);  // 0 if unknown

// Throws std::runtime_error naming the file and what is wrong with it.
SafeTensorsFile read_safetensors(const std::string& path);
// Written atomically (temporary file, fsync, rename, directory fsync) with `mode`: 0600 for a
// tenant's checkpoint, 0644 for backbone weights.
void write_safetensors(const std::string& path, const SafeTensorsFile& file, unsigned mode = 0644);

}  // namespace nexus::model
