#include "daemon/model/backbone_config.hpp"

namespace nexus::model {

std::optional<BackboneConfig> named_backbone(std::string_view name) {
  BackboneConfig c;
  c.name = std::string(name);
  if (name == "tiny") {
    c.dim = 128;
    c.layers = 2;
    c.heads = 4;
    c.init_seed = 1;
    return c;
  }
  if (name == "small") {
    c.dim = 384;
    c.layers = 6;
    c.heads = 6;
    c.init_seed = 2;
    return c;
  }
  return std::nullopt;
}

}  // namespace nexus::model
