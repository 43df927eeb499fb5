#include <filesystem>
#include <stdexcept>

#include "processes.hpp"

namespace nexus::test {

std::string nexusd_path() { return NEXUS_TEST_NEXUSD; }
std::string ping_tenant_path() { return NEXUS_TEST_PING_TENANT; }
std::string nexusctl_path() { return NEXUS_TEST_NEXUSCTL; }
std::string probe_access_path() { return NEXUS_TEST_PROBE_ACCESS; }

std::string tiny_weights_path() {
  const std::string path = std::string(NEXUS_TEST_WEIGHTS_DIR) + "/backbone-tiny.safetensors";
  if (!std::filesystem::exists(path))
    throw std::runtime_error(path + " is missing: it is committed in weights/ (scripts/pretrain.sh makes it)");
  return path;
}

}  // namespace nexus::test
