// The built-in tasks' MJCF models (sim/assets/*.xml), compiled into the library by CMake so that
// an installed nexusd needs no data files.
#pragma once

namespace nexus::sim::assets {
extern const char* const kReachXml;
extern const char* const kPushXml;
}  // namespace nexus::sim::assets
