// Clients of a StoreServer for tests/collective/store_test.cc and store_strangers_test.cc: a
// StoreClient of the protocol, and raw TCP connections that say what a test wants, or nothing.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "collective/store/store_client.h"
#include "collective/store/store_server.h"

namespace dist::collective::store_testing {

inline std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

inline c10::intrusive_ptr<StoreClient> client_of(
    const StoreServer& server, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000),
    const std::string& token = "") {
  return c10::make_intrusive<StoreClient>(server.address(), timeout, token);
}

// A raw TCP connection to ip:port (-1 if refused).
inline int raw_connect(const std::string& ip, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip.c_str(), &to.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the server closed `fd` within 5 s (what it does to a client it refuses).
inline bool closed_by_server(int fd) {
  timeval wait{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  char c;
  const ssize_t n = recv(fd, &c, 1, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

}  // namespace dist::collective::store_testing
