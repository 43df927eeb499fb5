// An in-process tenant on a test daemon (libnexus), for tests that drive the client API directly.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "nexus/client.hpp"
#include "processes.hpp"

namespace nexus::test {

// Attached as `tenant`; `timeout` per request is long: a loaded CI machine answers slowly.
inline std::unique_ptr<nexus::Client> attach_tenant(const Daemon& d, const std::string& tenant,
                                                    std::chrono::seconds timeout = std::chrono::seconds(120)) {
  nexus::ClientOptions o;
  o.socket_path = d.socket();
  o.tenant = tenant;
  o.timeout = timeout;
  return nexus::Client::attach(o);
}

}  // namespace nexus::test
