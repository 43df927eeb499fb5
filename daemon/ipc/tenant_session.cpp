#include "daemon/ipc/tenant_session.hpp"

#include <unistd.h>

namespace nexus::daemon {

TenantSession::TenantSession(int socket_fd, ucred peer_cred, std::string tenant_name,
                             std::uint64_t id, std::shared_ptr<TenantSegment> seg, int daemon_db,
                             int client_db)
    : socket(socket_fd),
      peer(peer_cred),
      name(std::move(tenant_name)),
      session_id(id),
      segment(std::move(seg)),
      daemon_doorbell(daemon_db),
      client_doorbell(client_db),
      requests(segment->request_ring(), segment->layout().ring_capacity),
      responses(segment->response_ring(), segment->layout().ring_capacity) {}

TenantSession::~TenantSession() {
  alive->store(false);
  for (int fd : offered_fds) ::close(fd);
  ::close(socket);
  ::close(daemon_doorbell);
  ::close(client_doorbell);
}

}  // namespace nexus::daemon
