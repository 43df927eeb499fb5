// The control socket: adopted from systemd socket activation (sd_listen_fds) when one was
// passed, else bound at the configured path.
#pragma once
#include <sys/types.h>

#include <string>
#include <utility>

#include "daemon/config/config.hpp"

namespace nexus::daemon {

struct Listener {
  int fd = -1;
  bool from_systemd = false;
  std::string path;  // the path we bound and must unlink on exit (empty when from systemd)
  std::pair<dev_t, ino_t> file{};  // the socket file's identity at the path, checked before that unlink
  std::string warning;  // for the log: the socket's group could not be set
};

// Throws std::runtime_error naming the path and errno on failure, including when another
// daemon already answers on the path.
Listener open_listener(const DaemonConfig& config);
void close_listener(Listener& l);

}  // namespace nexus::daemon
