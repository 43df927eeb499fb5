#include "daemon/ipc/listener.hpp"

#include <fcntl.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace nexus::daemon {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

sockaddr_un address_of(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path)
    throw std::runtime_error("socket path too long (" + std::to_string(path.size()) + "): " + path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

// A socket file left by a daemon that died is removed; one that still answers is not ours.
void remove_stale(const std::string& path, const sockaddr_un& a) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;
  if (!S_ISSOCK(st.st_mode)) throw std::runtime_error(path + " exists and is not a socket");
  const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool live = ::connect(probe, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
  ::close(probe);
  if (live) throw std::runtime_error("another nexusd is listening on " + path);
  ::unlink(path.c_str());
}

}  // namespace

Listener open_listener(const DaemonConfig& config) {
  Listener l;
  const int passed = sd_listen_fds(1);
  if (passed > 1) throw std::runtime_error("systemd passed more than one socket");
  if (passed == 1) {
    if (sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, nullptr, 0) <= 0)
      throw std::runtime_error("the socket systemd passed is not a listening Unix stream socket");
    l.fd = SD_LISTEN_FDS_START;
    l.from_systemd = true;
    ::fcntl(l.fd, F_SETFD, FD_CLOEXEC);
    ::fcntl(l.fd, F_SETFL, ::fcntl(l.fd, F_GETFL) | O_NONBLOCK);
    return l;
  }
  const sockaddr_un a = address_of(config.socket_path);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(config.socket_path).parent_path(), ec);
  remove_stale(config.socket_path, a);
  // Bound under a staging name, given its group, listening, and only then renamed onto the
  // path: the path never names a socket that refuses connects (between bind and listen) or has
  // the wrong group, so a client or script that waits for the file, and a second nexusd's
  // stale-socket probe, never meet one. A path too long to stage is bound in place.
  std::string staging = config.socket_path + ".binding";
  if (staging.size() >= sizeof a.sun_path) staging = config.socket_path;
  const sockaddr_un staged = address_of(staging);
  if (staging != config.socket_path) remove_stale(staging, staged);  // a start that died before its rename
  l.fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (l.fd < 0) fail("socket");
  // The socket file is born with its mode (a umask around bind), never chmod'ed by path
  // afterwards: nothing here follows a symlink someone could put in its place.
  const mode_t old_mask = ::umask(0777 & ~static_cast<mode_t>(config.socket_mode));
  const int bound = ::bind(l.fd, reinterpret_cast<const sockaddr*>(&staged), sizeof staged);
  ::umask(old_mask);
  if (bound != 0) fail("bind " + staging);
  if (!config.socket_group.empty()) {
    if (const group* g = ::getgrnam(config.socket_group.c_str())) {
      if (::fchownat(AT_FDCWD, staging.c_str(), static_cast<uid_t>(-1), g->gr_gid, AT_SYMLINK_NOFOLLOW) != 0)
        l.warning = "cannot give " + config.socket_path + " to group " + config.socket_group + ": " + std::strerror(errno);
    } else {
      l.warning = "no group '" + config.socket_group + "': " + config.socket_path + " keeps nexusd's group";
    }
  }
  if (::listen(l.fd, 128) != 0 || (staging != config.socket_path && ::rename(staging.c_str(), config.socket_path.c_str()) != 0)) {
    const int why = errno;
    ::unlink(staging.c_str());
    errno = why;
    fail("listen on " + config.socket_path);
  }
  l.path = config.socket_path;
  return l;
}

void close_listener(Listener& l) {
  if (l.fd >= 0) ::close(l.fd);
  if (!l.path.empty()) ::unlink(l.path.c_str());
  l.fd = -1;
}

}  // namespace nexus::daemon
