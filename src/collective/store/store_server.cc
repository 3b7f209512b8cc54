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
#include <optional>
#include <stdexcept>

#include "collective/store/resolve.h"
#include "collective/store/store_protocol.h"

namespace dist::collective {

using store::Bytes;
using store::Op;
using store::Status;
using Clock = std::chrono::steady_clock;

struct StoreServer::Client {
  int fd = -1;
  std::string address;  // "127.0.0.1": what kMaxWaitingPerAddress counts by
  std::string peer;     // "127.0.0.1:51234", for the refusal log
  Clock::time_point accepted;
  bool said_hello = false;
  Bytes in;   // received, not yet handled
  Bytes out;  // replies not yet sent
  // A kWait that is not yet answered: no further request of this client is read meanwhile.
  std::optional<std::vector<std::string>> waiting_for;
  Clock::time_point wait_deadline;
  ~Client() {
    if (fd >= 0) close(fd);
  }
};

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

Bytes reply(Status status) { return store::Writer().u8(static_cast<uint8_t>(status)).frame(); }
Bytes reply(Status status, const Bytes& value) {
  return store::Writer().u8(static_cast<uint8_t>(status)).bytes(value).frame();
}
Bytes reply_number(int64_t value) {
  return store::Writer().u8(static_cast<uint8_t>(Status::kOk)).i64(value).frame();
}
Bytes reply_error(const std::string& why, Status status = Status::kError) {
  return store::Writer().u8(static_cast<uint8_t>(status)).str(why).frame();
}

// A counter: the number `value` holds as text (empty: 0) plus delta, written back. Throws
// std::invalid_argument if it holds something else.
int64_t add_to(Bytes& value, int64_t delta) {
  const int64_t now =
      (value.empty() ? 0 : std::stoll(std::string(value.begin(), value.end()))) + delta;
  const std::string text = std::to_string(now);
  value.assign(text.begin(), text.end());
  return now;
}

// The numeric address and port of `peer`.
std::pair<std::string, std::string> address_of(const sockaddr_storage& peer) {
  char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
  getnameinfo(reinterpret_cast<const sockaddr*>(&peer), sizeof(peer), host, sizeof(host), port,
              sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
  return {host, port};
}

// Equal strings, in time that depends only on their lengths (a token is not guessed byte by
// byte from how fast the server answers).
bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  return diff == 0;
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

bool StoreServer::closing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.count(store::kClosingKey) > 0;
}

bool StoreServer::check(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.count(key) > 0;
}

int64_t StoreServer::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  return add_to(data_[key], delta);
}

void StoreServer::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key].assign(value.begin(), value.end());
  }
  // serve() answers waits on its own thread, at its next turn (at most 100 ms away).
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

bool StoreServer::handle(Client& c, const uint8_t* body, size_t size) {
  store::Reader in(body, size);
  const auto op = static_cast<Op>(in.u8());
  if (!c.said_hello) return greet(c, op, in);
  std::lock_guard<std::mutex> lock(mu_);
  if (answer(c, op, in)) return true;
  ++refused_requests_;
  return false;  // malformed: drop the connection, keep serving the others
}

bool StoreServer::greet(Client& c, Op op, store::Reader& in) {
  const std::string magic = in.str(64);
  const uint32_t version = in.u32();
  const std::string token = in.str(store::kMaxTokenBytes);
  const std::string job_id = in.str(store::kMaxJobIdBytes);
  if (op != Op::kHello || magic != store::kMagic) {
    refuse(c.peer, "its first message is not the store's hello");
    return false;
  }
  if (version != store::kVersion || !in.ok() || !in.at_end()) {
    refuse(c.peer, "a hello of another protocol version (" + std::to_string(version) + ")");
    c.out = reply_error("this store speaks protocol version " + std::to_string(store::kVersion) +
                        ": run the same version of distribute on every worker");
    flush(c);
    return false;
  }
  // Another job's member (a rerun on the same addresses while this job's host winds down) is
  // told so, not blamed for its token: it leaves and waits for its own job's store.
  const bool other_job = !job_id.empty() && !job_id_.empty() && job_id != job_id_;
  const bool wrong_token = !same_token(token, job_token_);
  if (other_job || (wrong_token && closing())) {
    refuse(c.peer, other_job ? "a member of another job" : "a wrong job token while closing");
    c.out = reply_error(other_job ? "this store belongs to another job"
                                  : "this store's job has ended and it is closing",
                        Status::kNotThisJob);
    flush(c);
    return false;
  }
  if (wrong_token) {
    refuse(c.peer, token.empty() ? "no job token" : "a wrong job token");
    c.out = reply_error(token.empty() ? "this job needs a job token"
                                      : "the job token does not match this job's");
    flush(c);
    return false;
  }
  c.said_hello = true;
  c.out = reply(Status::kOk);
  return true;
}

namespace {

// A request's list of keys; empty (and the reader failed) beyond the limits.
std::vector<std::string> read_keys(store::Reader& in) {
  const uint32_t n = in.u32();
  std::vector<std::string> out;
  if (n > store::kMaxKeysPerRequest) return out;
  for (uint32_t i = 0; i < n && in.ok(); ++i) out.push_back(in.str(store::kMaxKeyBytes));
  return out;
}

}  // namespace

bool StoreServer::answer(Client& c, Op op, store::Reader& in) {
  switch (op) {
    case Op::kSet: {
      std::string key = in.str(store::kMaxKeyBytes);
      Bytes value = in.bytes(store::kMaxFrameBytes);
      if (!in.ok() || !in.at_end()) return false;
      data_[key] = std::move(value);
      c.out = reply(Status::kOk);
      return true;
    }
    case Op::kGet: {
      const std::string key = in.str(store::kMaxKeyBytes);
      if (!in.ok() || !in.at_end()) return false;
      auto it = data_.find(key);
      c.out = it == data_.end() ? reply(Status::kNotFound) : reply(Status::kOk, it->second);
      return true;
    }
    case Op::kAdd:
      return add(c, in);
    case Op::kCheck: {
      const auto wanted = read_keys(in);
      if (!in.ok() || !in.at_end()) return false;
      const bool all = std::all_of(wanted.begin(), wanted.end(),
                                   [&](const std::string& k) { return data_.count(k) > 0; });
      c.out = reply(all ? Status::kOk : Status::kNotFound);
      return true;
    }
    case Op::kWait: {
      const int64_t timeout_ms = in.i64();
      auto wanted = read_keys(in);
      if (!in.ok() || !in.at_end() || timeout_ms < 0) return false;
      c.waiting_for = std::move(wanted);
      c.wait_deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
      return true;  // answered by answer_waits
    }
    case Op::kDelete: {
      const std::string key = in.str(store::kMaxKeyBytes);
      if (!in.ok() || !in.at_end()) return false;
      c.out = reply(data_.erase(key) > 0 ? Status::kOk : Status::kNotFound);
      return true;
    }
    case Op::kNumKeys:
      if (!in.at_end()) return false;
      c.out = reply_number(static_cast<int64_t>(data_.size()));
      return true;
    case Op::kCompareSet:
      return compare_set(c, in);
    case Op::kHello:
      return false;
  }
  return false;
}

bool StoreServer::add(Client& c, store::Reader& in) {
  const std::string key = in.str(store::kMaxKeyBytes);
  const int64_t delta = in.i64();
  if (!in.ok() || !in.at_end()) return false;
  try {
    c.out = reply_number(add_to(data_[key], delta));
  } catch (const std::exception&) {
    c.out = reply_error("the value of '" + key + "' is not a number");
  }
  return true;
}

bool StoreServer::compare_set(Client& c, store::Reader& in) {
  const std::string key = in.str(store::kMaxKeyBytes);
  Bytes expected = in.bytes(store::kMaxFrameBytes);
  Bytes desired = in.bytes(store::kMaxFrameBytes);
  if (!in.ok() || !in.at_end()) return false;
  auto it = data_.find(key);
  if (it == data_.end()) {
    if (expected.empty()) data_[key] = desired;
    c.out = reply(Status::kOk, expected.empty() ? desired : expected);
  } else if (it->second == expected) {
    it->second = std::move(desired);
    c.out = reply(Status::kOk, it->second);
  } else {
    c.out = reply(Status::kOk, it->second);
  }
  return true;
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

void StoreServer::answer_waits() {
  const auto now = Clock::now();
  for (auto& c : clients_) {
    if (!c->waiting_for) continue;
    bool all = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      all = std::all_of(c->waiting_for->begin(), c->waiting_for->end(),
                        [&](const std::string& k) { return data_.count(k) > 0; });
    }
    if (!all && now < c->wait_deadline) continue;
    c->waiting_for.reset();
    c->out = reply(all ? Status::kOk : Status::kTimeout);
    flush(*c);  // a failure shows at the next poll as POLLERR/POLLHUP
  }
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
