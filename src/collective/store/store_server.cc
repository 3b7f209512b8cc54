// StoreServer's connections: the listener, accepting (making room as the header says), reading
// frames, sending replies and closing. What the requests do to the map is store_requests.cc's.
#include "collective/store/store_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "collective/store/resolve.h"
#include "collective/store/store_connection.h"
#include "collective/store/store_protocol.h"

namespace dist::collective {

using store::Bytes;
using Clock = std::chrono::steady_clock;

namespace {

// Connections accepted per turn of serve(): between turns every connection already accepted is
// read, so a member whose hello arrived just after it was accepted is seen before a flood of
// newer connections could make it give way (make_room).
constexpr int kAcceptsPerTurn = 16;
// How long the listener rests when accept fails and no waiting connection can be closed for
// room (every descriptor the process may open held by members; the system out of memory).
constexpr std::chrono::milliseconds kAcceptPause{100};

std::runtime_error bind_error(const HostPort& at, const std::string& why) {
  return std::runtime_error("cannot listen on " + at.to_string() + ": " + why);
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// The numeric address and port of `peer`.
std::pair<std::string, std::string> address_of(const sockaddr_storage& peer) {
  char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
  getnameinfo(reinterpret_cast<const sockaddr*>(&peer), sizeof(peer), host, sizeof(host), port,
              sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
  return {host, port};
}

}  // namespace

StoreServer::StoreServer(const HostPort& at, std::string job_token, std::string job_id)
    : address_(at), job_token_(std::move(job_token)), job_id_(std::move(job_id)) {
  if (!job_id_.empty()) data_[store::kJobIdKey] = store::Bytes(job_id_.begin(), job_id_.end());
  std::string why = "no address";
  const store::AddressList addresses = store::resolve(at, &why);
  if (!addresses) throw bind_error(at, why);
  for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int on = 1;
    // A previous job's connections in TIME_WAIT must not keep the port from the next job.
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) {
      listener_ = fd;
      sockaddr_storage bound{};
      socklen_t length = sizeof(bound);
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
      address_.port =
          ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      break;
    }
    why = std::strerror(errno);
    close(fd);
  }
  if (listener_ < 0) throw bind_error(at, why);
  set_nonblocking(listener_);
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    close(listener_);
    throw bind_error(at, std::string("pipe failed: ") + std::strerror(errno));
  }
  thread_ = std::thread([this] { serve(); });
}

StoreServer::~StoreServer() {
  const char stop = 1;
  [[maybe_unused]] ssize_t n = write(wake_[1], &stop, 1);
  thread_.join();
  clients_.clear();
  close(listener_);
  close(wake_[0]);
  close(wake_[1]);
}

void StoreServer::serve() {
  while (true) {
    std::vector<pollfd> fds;
    fds.push_back({wake_[0], POLLIN, 0});
    const bool accepting = Clock::now() >= accept_paused_until_;
    fds.push_back({listener_, static_cast<short>(accepting ? POLLIN : 0), 0});
    for (const auto& c : clients_) {
      short events = 0;
      if (!c->waiting_for && c->out.empty()) events |= POLLIN;
      if (!c->out.empty()) events |= POLLOUT;
      fds.push_back({c->fd, events, 0});
    }
    // Waits time out, and direct set() calls may satisfy them: look again at least every 100 ms.
    if (poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;
    std::vector<bool> drop(clients_.size(), false);
    for (size_t i = 0; i < clients_.size() && i + 2 < fds.size(); ++i) {
      Client& c = *clients_[i];
      const short revents = fds[i + 2].revents;
      if (revents & (POLLERR | POLLNVAL)) drop[i] = true;
      if (!drop[i] && (revents & POLLOUT)) drop[i] = !flush(c);
      if (!drop[i] && (revents & (POLLIN | POLLHUP))) drop[i] = !read_from(c);
      if (!drop[i] && !c.waiting_for && c.out.empty()) drop[i] = !handle_frames(c);
    }
    for (size_t i = drop.size(); i-- > 0;)
      if (drop[i]) clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(i));
    // After the connections already accepted are served: making room may close some of them.
    if (fds[1].revents & POLLIN) accept_clients();
    answer_waits();
    close_silent_clients();
  }
}

void StoreServer::accept_clients() {
  for (int accepted = 0; accepted < kAcceptsPerTurn; ++accepted) {
    sockaddr_storage peer{};
    socklen_t length = sizeof(peer);
    const int fd = accept4(listener_, reinterpret_cast<sockaddr*>(&peer), &length,
                           SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      admit(fd, peer);
      continue;
    }
    const int error = errno;
    if (error == EAGAIN || error == EWOULDBLOCK) return;
    if (error == EINTR || error == ECONNABORTED) continue;
    // Out of descriptors (the process's RLIMIT_NOFILE, often 1024, can be below
    // kMaxConnections): a stranger's connection gives one back.
    if ((error == EMFILE || error == ENFILE) &&
        close_oldest_waiting(nullptr,
                             "no hello yet when the store's process had no file "
                             "descriptor left for a newer connection"))
      continue;
    accept_paused_until_ = Clock::now() + kAcceptPause;
    return;
  }
}

void StoreServer::admit(int fd, const sockaddr_storage& peer) {
  auto client = std::make_unique<Client>();
  client->fd = fd;  // closed with the client, whatever happens below
  const auto [address, port] = address_of(peer);
  client->address = address;
  client->peer = address + ":" + port;
  client->accepted = Clock::now();
  if (!make_room(client->address)) {
    refuse(client->peer, "too many connections (at most " + std::to_string(store::kMaxConnections) +
                             ", every one of them a member's)");
    return;
  }
  const int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  // A member sends its hello as soon as it is connected: it is usually here already, and once
  // answered, this connection is a member's and never gives way to newer ones.
  if (!read_from(*client) || !handle_frames(*client)) return;
  clients_.push_back(std::move(client));
}

bool StoreServer::make_room(const std::string& address) {
  const auto waiting_here = std::count_if(clients_.begin(), clients_.end(), [&](const auto& c) {
    return !c->said_hello && c->address == address;
  });
  if (waiting_here >= store::kMaxWaitingPerAddress)
    close_oldest_waiting(&address, "no hello yet when a newer connection came from its address (" +
                                       std::to_string(store::kMaxWaitingPerAddress) +
                                       " may wait for their hello per address)");
  if (static_cast<int>(clients_.size()) < store::kMaxConnections) return true;
  return close_oldest_waiting(nullptr, "no hello yet when the store was full (" +
                                           std::to_string(store::kMaxConnections) +
                                           " connections) and a newer one came");
}

bool StoreServer::close_oldest_waiting(const std::string* address, const std::string& why) {
  for (auto it = clients_.begin(); it != clients_.end(); ++it) {
    if ((*it)->said_hello || (address != nullptr && (*it)->address != *address)) continue;
    refuse((*it)->peer, why);
    clients_.erase(it);
    return true;
  }
  return false;
}

bool StoreServer::read_from(Client& c) {
  uint8_t buffer[65536];
  while (true) {
    // Never hold more than one frame's worth: the length is checked before the rest is read.
    const ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
    if (n > 0) {
      c.in.insert(c.in.end(), buffer, buffer + n);
      if (!c.said_hello && c.in.size() >= 4 &&
          store::read_u32(c.in.data()) > store::kMaxHelloBytes) {
        refuse(c.peer, "its first message is not the store's hello");
        return false;
      }
      if (c.in.size() >= 4 && store::read_u32(c.in.data()) > store::kMaxFrameBytes) {
        ++refused_requests_;
        return false;
      }
      if (c.in.size() > store::kMaxFrameBytes + 4u) return false;  // several frames pipelined
      continue;
    }
    if (n == 0) return false;  // closed by the client
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }
}

bool StoreServer::handle_frames(Client& c) {
  size_t used = 0;
  while (!c.waiting_for && c.out.empty() && c.in.size() - used >= 4) {
    const uint32_t length = store::read_u32(c.in.data() + used);
    if (length > store::kMaxFrameBytes) {
      ++refused_requests_;
      return false;
    }
    if (c.in.size() - used - 4 < length) break;
    const bool keep = handle(c, c.in.data() + used + 4, length);
    used += 4 + length;
    if (!keep) return false;
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(used));
  return flush(c);
}

bool StoreServer::flush(Client& c) {
  while (!c.out.empty()) {
    const ssize_t n = send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out.erase(c.out.begin(), c.out.begin() + n);
      continue;
    }
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
  }
  return true;
}

void StoreServer::refuse(const std::string& peer, const std::string& why) {
  const int64_t number = ++refused_connections_;
  std::lock_guard<std::mutex> lock(mu_);
  refusal_log_.push_back(std::to_string(number) + " " + peer + ": " + why);
  if (refusal_log_.size() > store::kRefusalLogLines) refusal_log_.erase(refusal_log_.begin());
  std::string text;
  for (const auto& line : refusal_log_) text += line + "\n";
  data_[store::kRefusalLogKey].assign(text.begin(), text.end());
}

void StoreServer::close_silent_clients() {
  const auto limit = Clock::now() - std::chrono::milliseconds(store::kHelloTimeoutMs);
  for (size_t i = clients_.size(); i-- > 0;) {
    if (clients_[i]->said_hello || clients_[i]->accepted > limit) continue;
    refuse(clients_[i]->peer,
           "no hello within " + std::to_string(store::kHelloTimeoutMs / 1000) + " s");
    clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

}  // namespace dist::collective
