#include "daemon/state/private_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

namespace nexus::daemon {
namespace {

[[noreturn]] void fail(const std::filesystem::path& p, const char* what) {
  throw std::runtime_error(p.string() + ": " + what + ": " + std::strerror(errno));
}

void fsync_dir(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(dir, "cannot open directory");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail(dir, "cannot sync directory");
}

}  // namespace

void ensure_private_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);  // an existing one is fine; checked below
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) fail(dir, "cannot create directory");
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    fail(dir, "is not a directory (a symlink?)");
  }
  if (st.st_uid != ::geteuid()) {
    errno = EPERM;
    fail(dir, "belongs to another user");
  }
  if ((st.st_mode & 07777) != 0700 && ::chmod(dir.c_str(), 0700) != 0) fail(dir, "cannot make it private");
}

void write_private_file(const std::filesystem::path& path, std::string_view bytes, unsigned mode) {
  const auto dir = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  std::random_device rd;
  const auto tmp = dir / ("." + path.filename().string() + ".tmp" + std::to_string(rd()));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) fail(tmp, "cannot create");
  ::fchmod(fd, mode);  // whatever the umask said
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(tmp, "write failed");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail(tmp, "cannot sync");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail(path, "cannot move into place");
  }
  fsync_dir(dir);
}

}  // namespace nexus::daemon
