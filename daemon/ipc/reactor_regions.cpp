// Regions: memory a tenant registers so that its requests can name tensors in it by offset, and
// features can be written into it (RegisterRegionRequest, UnregisterRegionRequest). The
// bookkeeping is the RegionTable's (regions.hpp); here: the switch, and pairing the request with
// the descriptor the tenant sent over its socket.
#include <unistd.h>

#include "daemon/ipc/reactor.hpp"
#include "daemon/log/log.hpp"

namespace nexus::daemon {

void Reactor::register_region(TenantSession& s, std::uint64_t request_id, const wire::RegisterRegionRequest& req) {
  // The descriptor travels first, as for a dataset load: take the newest, close older ones.
  collect_offered_fds(s);
  int fd = -1;
  if (!s.offered_fds.empty()) {
    fd = s.offered_fds.back();
    s.offered_fds.pop_back();
  }
  for (int stale : s.offered_fds) ::close(stale);
  s.offered_fds.clear();
  auto refuse = [&](wire::ErrorCode code, const std::string& why) {
    if (fd >= 0) ::close(fd);
    ++s.errors;
    push_reply(s, replies_.error(request_id, code, why));
  };
  if (!config_.allow_device_regions)
    return refuse(wire::ErrorCode::PermissionDenied, "regions are off on this nexusd ([ipc] allow_device_regions)");
  if (fd < 0) return refuse(wire::ErrorCode::BadMessage, "send the region's descriptor on the control socket first");
  if (req.kind() != wire::RegionKind::Host && req.kind() != wire::RegionKind::CudaFd)
    return refuse(wire::ErrorCode::BadMessage, "unknown region kind");
  auto& importer = req.kind() == wire::RegionKind::CudaFd ? *cuda_importer_ : *host_importer_;
  auto added = s.regions->add(importer, fd, req.bytes());  // owns fd from here
  if (auto* refusal = std::get_if<RegionRefusal>(&added)) {
    ++s.errors;
    push_reply(s, replies_.error(request_id, refusal->code, refusal->reason));
    return;
  }
  const auto r = std::get<RegionTable::Registered>(added);
  NEXUS_LOG(info, "region", "tenant={} region={} bytes={} kind={}", s.name, r.id, r.bytes,
            wire::EnumNameRegionKind(req.kind()));
  push_reply(s, replies_.region_registered(request_id, r.id, r.bytes));
}

void Reactor::unregister_region(TenantSession& s, std::uint64_t request_id, std::uint32_t region) {
  if (!s.regions->remove(region)) {
    ++s.errors;
    push_reply(s, replies_.error(request_id, wire::ErrorCode::UnknownRegion,
                                 "region " + std::to_string(region) + " is not one this attachment registered"));
    return;
  }
  push_reply(s, replies_.region_unregistered(request_id, region));
}

}  // namespace nexus::daemon
