// HostPort: a TCP address, "host:port".
#pragma once

#include <string>

namespace dist {

struct HostPort {
  std::string host;
  int port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};

}  // namespace dist
