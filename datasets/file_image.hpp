// A tenant's demonstration file read whole from the descriptor it sent, and opened in place as an
// HDF5 file image (no path is ever opened with the daemon's rights). Internal to datasets/.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "datasets/hdf5_handles.hpp"

namespace nexus::datasets::detail {

// The whole of a regular file, from offset 0 (the fd's own offset is left alone); DatasetError
// when it is not a regular file or is over kMaxImageFile.
std::vector<unsigned char> read_whole(int fd, const std::string& name);

struct ImageBuffer {
  void* data;
  std::size_t size;
};
// Opens `buffer` read-only as an HDF5 file, reading it in place; an invalid File on failure.
// `buffer` (and what it points to) must outlive the returned file and every object opened in it.
File open_image(ImageBuffer& buffer);

}  // namespace nexus::datasets::detail
