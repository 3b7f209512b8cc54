// The addresses of a host and port for a TCP socket, shared by the store's server (to bind)
// and client (to connect).
#pragma once

#include <netdb.h>
#include <sys/socket.h>

#include <memory>
#include <string>

#include "dist/core/host_port.h"

namespace dist::collective::store {

using AddressList = std::unique_ptr<addrinfo, void (*)(addrinfo*)>;

// getaddrinfo for `at` (IPv4 or IPv6, numeric port); empty with *why set if the host does not
// resolve.
inline AddressList resolve(const HostPort& at, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(at.port);
  if (int rc = getaddrinfo(at.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    *why = std::string("cannot resolve the host: ") + gai_strerror(rc);
    return AddressList(nullptr, freeaddrinfo);
  }
  return AddressList(found, freeaddrinfo);
}

}  // namespace dist::collective::store
