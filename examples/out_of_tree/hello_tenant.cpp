// The smallest tenant program: attach, ask what backbone nexusd serves, ping it, detach.
#include <cstdio>

#include "nexus/client.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: hello_tenant SOCKET TENANT\n");
    return 2;
  }
  try {
    auto client = nexus::Client::attach({.socket_path = argv[1], .tenant = argv[2]});
    const auto bb = client->backbone();
    const std::vector<std::uint8_t> hello = {'h', 'i'};
    const bool echoed = client->ping(hello) == hello;
    std::printf("{\"backbone\":\"%s\",\"image_size\":%d,\"echoed\":%s}\n", bb.name.c_str(), bb.image_size,
                echoed ? "true" : "false");
    return echoed ? 0 : 1;
  } catch (const nexus::Error& e) {
    std::fprintf(stderr, "hello_tenant: %s\n", e.what());
    return 1;
  }
}
