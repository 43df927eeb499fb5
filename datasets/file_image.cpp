#include "datasets/file_image.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "datasets/demo_file.hpp"

namespace nexus::datasets::detail {

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
namespace {
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

}  // namespace

namespace {
std::atomic<std::uint64_t> image_counter{0};
}  // namespace

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

}  // namespace nexus::datasets::detail
