// The store's key-value map: the direct access of the hosting process and the answers to the
// requests of its clients (the protocol of store_protocol.h). The connections that carry them are
// store_server.cc's.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <stdexcept>

#include "collective/store/store_connection.h"
#include "collective/store/store_protocol.h"
#include "collective/store/store_server.h"

namespace dist::collective {

using store::Bytes;
using store::Op;
using store::Status;
using Clock = std::chrono::steady_clock;

namespace {

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

// Equal strings, in time that depends only on their lengths (a token is not guessed byte by
// byte from how fast the server answers).
bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  return diff == 0;
}

// A request's list of keys; empty (and the reader failed) beyond the limits.
std::vector<std::string> read_keys(store::Reader& in) {
  const uint32_t n = in.u32();
  std::vector<std::string> out;
  if (n > store::kMaxKeysPerRequest) return out;
  for (uint32_t i = 0; i < n && in.ok(); ++i) out.push_back(in.str(store::kMaxKeyBytes));
  return out;
}

}  // namespace

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

}  // namespace dist::collective
