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

// A socket file left by a daemon that died is removed; one that still answers is not ours, and
// one we cannot tell about (a probe that fails otherwise than refused) is left alone.
void remove_stale(const std::string& path, const sockaddr_un& a) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;
  if (!S_ISSOCK(st.st_mode)) throw std::runtime_error(path + " exists and is not a socket");
  const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int connected = ::connect(probe, reinterpret_cast<const sockaddr*>(&a), sizeof a);
  const int why = errno;
  ::close(probe);
  if (connected == 0) throw std::runtime_error("another nexusd is listening on " + path);
  if (why == ENOENT) return;
  if (why != ECONNREFUSED) throw std::runtime_error("cannot tell whether " + path + " is in use: " + std::strerror(why));
  ::unlink(path.c_str());
}

// A private staging directory and the socket name bound in it (both empty: binding in place).
// Both are removed however open_listener ends: published, the socket lives on at its path.
struct Staging {
  std::string dir, socket;
  Staging() = default;
  Staging(const Staging&) = delete;
  ~Staging() {
    if (dir.empty()) return;
    ::unlink(socket.c_str());
    ::rmdir(dir.c_str());
  }
};

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
  // Bound in a private staging directory beside the path (mkdtemp: 0700, an unpredictable
  // name nobody else can use or pre-empt), given its group, set listening, and only then linked
  // onto the path: the path never names a socket that refuses connects (between bind and
  // listen) or has not yet been given its group, so a script that waits for the file, and a
  // second nexusd's stale-socket probe, never meet one. A path too long to stage is bound in place.
  const std::string parent = std::filesystem::path(config.socket_path).parent_path().string();
  Staging stage;
  if (std::string dir = (parent.empty() ? "." : parent) + "/.nexusd-XXXXXX";
      dir.size() + 2 < sizeof a.sun_path && ::mkdtemp(dir.data()) != nullptr)
    stage.dir = dir, stage.socket = dir + "/s";
  const std::string& bind_path = stage.dir.empty() ? config.socket_path : stage.socket;
  const sockaddr_un bind_at = address_of(bind_path);
  l.fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (l.fd < 0) fail("socket");
  // The socket file is born with its mode (a umask around bind), never chmod'ed by path
  // afterwards: nothing here follows a symlink someone could put in its place.
  const mode_t old_mask = ::umask(0777 & ~static_cast<mode_t>(config.socket_mode));
  const int bound = ::bind(l.fd, reinterpret_cast<const sockaddr*>(&bind_at), sizeof bind_at);
  ::umask(old_mask);
  if (bound != 0) fail("bind " + config.socket_path);
  if (!config.socket_group.empty()) {
    if (const group* g = ::getgrnam(config.socket_group.c_str())) {
      if (::fchownat(AT_FDCWD, bind_path.c_str(), static_cast<uid_t>(-1), g->gr_gid, AT_SYMLINK_NOFOLLOW) != 0)
        l.warning = "cannot give " + config.socket_path + " to group " + config.socket_group + ": " + std::strerror(errno);
    } else {
      l.warning = "no group '" + config.socket_group + "': " + config.socket_path + " keeps nexusd's group";
    }
  }
  if (::listen(l.fd, 128) != 0) fail("listen " + config.socket_path);
  // A hard link, unlike a rename, never replaces a socket another nexusd put at the path meanwhile.
  if (!stage.dir.empty() && ::link(stage.socket.c_str(), config.socket_path.c_str()) != 0)
    fail(errno == EEXIST ? config.socket_path + " appeared while nexusd was binding (another nexusd starting?)"
                         : "link " + config.socket_path);
  l.path = config.socket_path;
  struct stat st;
  if (::lstat(l.path.c_str(), &st) == 0) l.file = {st.st_dev, st.st_ino};
  return l;
}

void close_listener(Listener& l) {
  if (l.fd >= 0) ::close(l.fd);
  // Only the file we bound: a socket another nexusd put at the path since is not ours to remove.
  struct stat st;
  if (!l.path.empty() && ::lstat(l.path.c_str(), &st) == 0 && l.file == std::pair{st.st_dev, st.st_ino})
    ::unlink(l.path.c_str());
  l.fd = -1;
}

}  // namespace nexus::daemon
