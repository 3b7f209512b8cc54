#include "collective/store/store_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "collective/store/resolve.h"
#include "core/stop_request.h"
#include "dist/core/error.h"

namespace dist::collective {

using store::Op;
using store::Status;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// A reply may take this much longer than the wait it answers (a busy server).
constexpr milliseconds kReplySlack{5000};
// A long wait is made of server-side waits this long, with a look for a stop signal between.
constexpr milliseconds kWaitSlice{250};

int milliseconds_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, 1000)));
}

// One attempt: a connected socket, or -1 with *why set.
int connect_once(const HostPort& at, Clock::time_point deadline, std::string* why) {
  const store::AddressList addresses = store::resolve(at, why);
  for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      while ((rc = poll(&p, 1, std::max(1, milliseconds_left(deadline)))) == 0 &&
             Clock::now() < deadline) {
      }
      int error = rc > 0 ? 0 : ETIMEDOUT;
      socklen_t length = sizeof(error);
      if (rc > 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
      rc = error == 0 ? 0 : -1;
      errno = error;
    }
    if (rc == 0) {
      const int on = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
      return fd;
    }
    *why = std::strerror(errno);
    close(fd);
  }
  return -1;
}

}  // namespace

void record_leave(JobStore& store, const std::string& name) {
  const int64_t beats = store.add(JobStore::kProcessKeyPrefix + name, 0);
  store.set(JobStore::kLeftKeyPrefix + name, to_bytes(std::to_string(beats)));
}

bool say_left(const HostPort& at, const std::string& job_token, const std::string& job_id,
              const std::string& name, milliseconds timeout) noexcept {
  try {
    StoreClient store(at, timeout, job_token, "", job_id, /*stop_on_signal=*/false);
    record_leave(store, name);
    return true;
  } catch (...) {
    return false;
  }
}

bool store_listening(const HostPort& at, milliseconds timeout) {
  std::string why;
  const int fd = connect_once(at, Clock::now() + timeout, &why);
  if (fd < 0) return false;
  close(fd);
  return true;
}

StoreClient::StoreClient(const HostPort& at, milliseconds timeout, const std::string& job_token,
                         std::string key_scope, const std::string& job_id, bool stop_on_signal)
    : JobStore(timeout), at_(at), key_scope_(std::move(key_scope)) {
  const auto deadline = Clock::now() + timeout;
  std::string why = "no address";
  // Connections the store closed before answering the hello: the store may be full of
  // strangers' connections, which give way to newer ones (store_protocol.h,
  // kMaxWaitingPerAddress), so this process tries again until its timeout.
  int unanswered = 0;
  while (true) {
    if (stop_on_signal) detail::throw_if_stop_requested("connecting to the rendezvous store");
    fd_ = connect_once(at_, std::min(deadline, Clock::now() + kWaitSlice), &why);
    if (fd_ >= 0) {
      if (say_hello(job_token, job_id, deadline)) return;
      ++unanswered;
      why = last_failure_;
    }
    if (Clock::now() >= deadline) break;
    // The server may not listen yet, or be busy turning strangers away.
    std::this_thread::sleep_for(milliseconds(unanswered > 0 ? 100 : 50));
  }
  if (unanswered > 0)
    throw CollectiveError(detail::concat(
        "cannot join the rendezvous store at ", at_.to_string(), " within ",
        timeout.count() / 1000.0, " s: it accepted ", unanswered,
        " connection(s) from this process but answered none of their hellos (the last: ", why,
        "); a store that closes connections before their hello may be flooded by connections "
        "that are not its job's (see docs/security.md), or its job's workers fill all its ",
        store::kMaxConnections, " connections"));
  throw CollectiveError(detail::concat("cannot reach the rendezvous store at ", at_.to_string(),
                                       " within ", timeout.count() / 1000.0, " s: ", why));
}

bool StoreClient::say_hello(const std::string& job_token, const std::string& job_id,
                            Clock::time_point deadline) {
  store::Writer hello;
  hello.u8(static_cast<uint8_t>(Op::kHello))
      .str(store::kMagic)
      .u32(store::kVersion)
      .str(job_token)
      .str(job_id);
  Reply answer{Status::kError, {}};
  try {
    answer =
        call(hello, std::max(milliseconds(1),
                             std::chrono::duration_cast<milliseconds>(deadline - Clock::now())));
  } catch (const CollectiveError&) {
    return false;  // closed or reset before an answer: fail() closed fd_, last_failure_ says why
  }
  if (answer.status == Status::kOk) return true;
  store::Reader why(answer.body.data(), answer.body.size());
  const std::string text = why.str(store::kMaxFrameBytes);
  close(fd_);
  fd_ = -1;
  if (answer.status == Status::kNotThisJob)
    throw StoreOfAnotherJob(
        detail::concat("the rendezvous store at ", at_.to_string(), " is not this job's: ", text));
  throw StoreRefused(detail::concat(
      "lost the rendezvous store at ", at_.to_string(),
      ": it refused this process: ", why.ok() ? text : "a malformed answer",
      "; every worker of a job needs the same DIST_JOB_TOKEN (or DIST_JOB_TOKEN_FILE) and the "
      "same version of distribute"));
}

StoreClient::~StoreClient() {
  if (fd_ >= 0) close(fd_);
}

void StoreClient::fail(const std::string& why) {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  last_failure_ = why;
  throw CollectiveError(
      detail::concat("lost the rendezvous store at ", at_.to_string(), ": ", why));
}

void StoreClient::send_all(const store::Bytes& frame, Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = send(fd_, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      fail(std::strerror(errno));
    if (Clock::now() >= deadline) fail("it did not take a request in time");
    pollfd p{fd_, POLLOUT, 0};
    poll(&p, 1, std::max(1, milliseconds_left(deadline)));
  }
}

void StoreClient::receive(uint8_t* data, size_t size, Clock::time_point deadline) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = recv(fd_, data + got, size - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) fail("it closed the connection");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) fail(std::strerror(errno));
    if (Clock::now() >= deadline) fail("it did not answer in time");
    pollfd p{fd_, POLLIN, 0};
    poll(&p, 1, std::max(1, milliseconds_left(deadline)));
  }
}

StoreClient::Reply StoreClient::call(const store::Writer& request, milliseconds wait) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) fail("the connection failed earlier");
  const auto deadline = Clock::now() + wait + kReplySlack;
  send_all(request.frame(), deadline);
  uint8_t header[4];
  receive(header, 4, deadline);
  const uint32_t length = store::read_u32(header);
  if (length < 1 || length > store::kMaxFrameBytes) fail("it sent a malformed reply");
  store::Bytes body(length);
  receive(body.data(), length, deadline);
  return {static_cast<Status>(body[0]), store::Bytes(body.begin() + 1, body.end())};
}

namespace {

std::string error_text(const store::Bytes& body) {
  store::Reader in(body.data(), body.size());
  return in.str(store::kMaxFrameBytes);
}

int64_t number(const store::Bytes& body) {
  store::Reader in(body.data(), body.size());
  return in.i64();
}

store::Bytes value(const store::Bytes& body) {
  store::Reader in(body.data(), body.size());
  return in.bytes(store::kMaxFrameBytes);
}

}  // namespace

void StoreClient::set(const std::string& key, const std::vector<uint8_t>& value) {
  store::Writer w;
  w.u8(static_cast<uint8_t>(Op::kSet)).str(scoped(key)).bytes(value);
  call(w, timeout_);
}

std::vector<uint8_t> StoreClient::compareSet(const std::string& key,
                                             const std::vector<uint8_t>& expected,
                                             const std::vector<uint8_t>& desired) {
  store::Writer w;
  w.u8(static_cast<uint8_t>(Op::kCompareSet)).str(scoped(key)).bytes(expected).bytes(desired);
  return value(call(w, timeout_).body);
}

std::vector<uint8_t> StoreClient::get(const std::string& key) {
  wait({key}, timeout_);
  store::Writer w;
  w.u8(static_cast<uint8_t>(Op::kGet)).str(scoped(key));
  Reply r = call(w, timeout_);
  DIST_CHECK(r.status == Status::kOk, CollectiveError, "the key '", key,
             "' vanished from the rendezvous store at ", at_.to_string());
  return value(r.body);
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  store::Writer w;
  w.u8(static_cast<uint8_t>(Op::kAdd)).str(scoped(key)).i64(delta);
  Reply r = call(w, timeout_);
  DIST_CHECK(r.status == Status::kOk, CollectiveError, "add to '", key,
             "' in the rendezvous store at ", at_.to_string(), " failed: ", error_text(r.body));
  return number(r.body);
}

bool StoreClient::deleteKey(const std::string& key) {
  store::Writer w;
  w.u8(static_cast<uint8_t>(Op::kDelete)).str(scoped(key));
  return call(w, timeout_).status == Status::kOk;
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  store::Writer w;
  w.u8(static_cast<uint8_t>(Op::kCheck)).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(scoped(k));
  return call(w, timeout_).status == Status::kOk;
}

int64_t StoreClient::getNumKeys() {
  store::Writer w;
  w.u8(static_cast<uint8_t>(Op::kNumKeys));
  return number(call(w, timeout_).body);
}

void StoreClient::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

bool StoreClient::wait_once(const std::vector<std::string>& keys, milliseconds slice) {
  store::Writer w;
  w.u8(static_cast<uint8_t>(Op::kWait)).i64(slice.count()).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(scoped(k));
  return call(w, slice).status == Status::kOk;
}

void StoreClient::wait(const std::vector<std::string>& keys, const milliseconds& requested) {
  // c10d's kNoTimeout (0) means "forever"; here every wait is bounded by the store's timeout.
  const milliseconds timeout = requested.count() > 0 ? requested : timeout_;
  const auto deadline = Clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (wait_once(keys, std::max(milliseconds(1), std::min(left, kWaitSlice)))) return;
    if (Clock::now() >= deadline) break;
    // Only a wait that waits: a key that is there is read whatever is pending (a heartbeat
    // reading the refusal log after a SIGTERM must go on beating until the step ends).
    detail::throw_if_stop_requested("waiting for the other workers in the rendezvous store");
  }
  std::string names;
  for (const auto& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
  throw CollectiveError(detail::concat("timed out after ", timeout.count() / 1000.0,
                                       " s waiting for ", names, " in the rendezvous store at ",
                                       at_.to_string()));
}

}  // namespace dist::collective
