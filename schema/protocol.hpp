// Protocol constants shared by nexusd and libnexus. A peer with another kProtocolVersion is
// refused with ErrorCode::UnsupportedVersion at attach, and each ring message repeats the version.
#pragma once
#include <cstdint>

namespace nexus::schema {

inline constexpr std::uint32_t kProtocolVersion = 2;  // 2: jobs, accounting, metrics, cancel
inline constexpr const char* kDaemonVersion = "0.2.0";

// Control-socket frames are small (attach, status); anything bigger is hostile.
inline constexpr std::uint32_t kMaxControlFrameBytes = 1u << 20;

// Ring sizes accepted at attach (per ring, rounded up to a power of two).
inline constexpr std::uint32_t kMinRingBytes = 4096;
inline constexpr std::uint32_t kMaxRingBytes = 64u << 20;
inline constexpr std::uint32_t kDefaultRingBytes = 256u << 10;

inline constexpr const char* kDefaultSocketPath = "/run/nexus/nexusd.sock";

}  // namespace nexus::schema
