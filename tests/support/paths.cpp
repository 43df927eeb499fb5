#include "processes.hpp"

namespace nexus::test {

std::string nexusd_path() { return NEXUS_TEST_NEXUSD; }
std::string ping_tenant_path() { return NEXUS_TEST_PING_TENANT; }
std::string nexusctl_path() { return NEXUS_TEST_NEXUSCTL; }
std::string probe_access_path() { return NEXUS_TEST_PROBE_ACCESS; }

}  // namespace nexus::test
