// StoreConnection: one connection of a StoreServer's table (its Client), shared by the server's
// connection handling (store_server.cc) and its answers to requests (store_requests.cc).
#pragma once

#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "collective/store/store_protocol.h"

namespace dist::collective {

struct StoreConnection {
  int fd = -1;
  std::string address;  // "127.0.0.1": what kMaxWaitingPerAddress counts by
  std::string peer;     // "127.0.0.1:51234", for the refusal log
  std::chrono::steady_clock::time_point accepted;
  bool said_hello = false;
  store::Bytes in;   // received, not yet handled
  store::Bytes out;  // replies not yet sent
  // A kWait that is not yet answered: no further request of this client is read meanwhile.
  std::optional<std::vector<std::string>> waiting_for;
  std::chrono::steady_clock::time_point wait_deadline;
  ~StoreConnection() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace dist::collective
