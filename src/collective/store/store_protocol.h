// The wire format of the rendezvous store (StoreServer, StoreClient). Ours, not c10d's
// TCPStore's: LibTorch 1.13's TCPStore server listens on every interface and allocates whatever
// length a message declares (docs/design.md, "The rendezvous store").
//
// A frame is a little-endian u32 body length, then the body. A request body is one op byte and its
// fields; a reply body is one status byte and its fields. Fields: a string or byte string is a u32
// length and the bytes; a number is an i64. The first request on a connection must be kHello with
// kMagic, kVersion, the job's token (empty when the job has none) and the job's identity (empty
// when the job has none: job_id_from_environment in dist/distribute/cluster_resolver.h), or the
// server closes it; before the hello, a frame may declare at most kMaxHelloBytes. A frame longer
// than kMaxFrameBytes is refused from its length alone, before anything is allocated, and the
// connection closed.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace dist::collective::store {

constexpr char kMagic[] = "dist-store";
constexpr uint32_t kVersion = 3;  // 2: the hello carries the job token; 3: and the job's identity

// Limits, documented in docs/clusters.md ("The network"): rendezvous values are addresses and
// short start-up records, so these are generous.
constexpr uint32_t kMaxFrameBytes = 64u << 20;  // 64 MiB per message
constexpr uint32_t kMaxKeyBytes = 4096;
constexpr uint32_t kMaxKeysPerRequest = 4096;
constexpr int kMaxConnections = 1024;
constexpr uint32_t kMaxTokenBytes = 1024;
constexpr uint32_t kMaxJobIdBytes = 256;
constexpr uint32_t kMaxHelloBytes = 2048;  // a stranger cannot make the server hold more
// A connection that has not said a valid hello this long after it was accepted is closed. A
// member sends its hello as soon as it is connected, so on any network a job runs on it takes
// milliseconds; a stranger holding idle connections gets this long per connection.
constexpr int kHelloTimeoutMs = 3000;
// Connections still waiting for their hello, per peer address: when one more comes, the one of
// that address that has waited longest is closed. Members that said hello do not count, so any
// number of workers (and their several connections each) may share one host. kMaxConnections
// counts every connection: when the table is full, the connection (of any address) that has
// waited longest for its hello makes room, so strangers cannot keep a member out; only a table
// full of members refuses one. (docs/security.md)
constexpr int kMaxWaitingPerAddress = 64;

// The server's own key: the latest refused connections, one per line, "<number> <peer>:
// <reason>", the last kRefusalLogLines of them. The chief prints new lines (heartbeat.h).
constexpr char kRefusalLogKey[] = "dist/refused";
constexpr size_t kRefusalLogLines = 32;

// The server's own key: the identity of the job it serves (empty jobs have none), which a member
// reads to tell its own job's ended state from a previous job's (ElasticMembership::find_job).
constexpr char kJobIdKey[] = "dist/job-id";

enum class Op : uint8_t {
  kHello = 1,       // magic, version, token, job id -> kOk | kNotThisJob | kError, with why
  kSet = 2,         // key, value
  kGet = 3,         // key -> value | kNotFound
  kAdd = 4,         // key, i64 delta -> i64 (a missing key counts as 0)
  kCheck = 5,       // n, keys -> kOk if all exist | kNotFound
  kWait = 6,        // i64 timeout ms, n, keys -> kOk once all exist | kTimeout
  kDelete = 7,      // key -> kOk | kNotFound
  kNumKeys = 8,     // -> i64
  kCompareSet = 9,  // key, expected, desired -> the value now held (c10d's semantics)
};

// kNotThisJob answers a hello from a member of another job: the store's job has another
// identity, or it has ended ("closing") and the hello's token is not its own. Such a member
// leaves and waits for its own job's store; a wrong token for a running job is kError.
enum class Status : uint8_t { kOk = 0, kNotFound = 1, kTimeout = 2, kError = 3, kNotThisJob = 4 };

// The key a store's host sets once its job has ended (every member gone, or an elastic job
// finished or stopped): a member of a later job that finds it leaves and waits for its own.
constexpr char kClosingKey[] = "closing";

using Bytes = std::vector<uint8_t>;

// Appends fields to a frame body.
class Writer {
 public:
  Writer& u8(uint8_t v) {
    body_.push_back(v);
    return *this;
  }
  Writer& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) body_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Writer& i64(int64_t v) {
    const auto u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) body_.push_back(static_cast<uint8_t>(u >> (8 * i)));
    return *this;
  }
  Writer& bytes(const uint8_t* data, size_t size) {
    u32(static_cast<uint32_t>(size));
    body_.insert(body_.end(), data, data + size);
    return *this;
  }
  Writer& str(const std::string& s) {
    return bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  Writer& bytes(const Bytes& b) { return bytes(b.data(), b.size()); }
  // The body with its length in front.
  Bytes frame() const {
    Bytes out;
    out.reserve(body_.size() + 4);
    const auto n = static_cast<uint32_t>(body_.size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
    out.insert(out.end(), body_.begin(), body_.end());
    return out;
  }

 private:
  Bytes body_;
};

inline uint32_t read_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// Reads fields from a frame body; any read past the end sets ok() to false and yields zeros,
// so a malformed request is detected once, after parsing it.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  uint8_t u8() { return take(1) ? p_[-1] : 0; }
  uint32_t u32() { return take(4) ? read_u32(p_ - 4) : 0; }
  int64_t i64() {
    if (!take(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p_[i - 8]) << (8 * i);
    return static_cast<int64_t>(v);
  }
  Bytes bytes(uint32_t max_size) {
    const uint32_t n = u32();
    if (!ok_ || n > max_size || !take(n)) {
      ok_ = false;
      return {};
    }
    return Bytes(p_ - n, p_);
  }
  std::string str(uint32_t max_size) {
    Bytes b = bytes(max_size);
    return std::string(b.begin(), b.end());
  }
  bool ok() const { return ok_; }
  bool at_end() const { return p_ == end_; }

 private:
  bool take(size_t n) {
    if (!ok_ || static_cast<size_t>(end_ - p_) < n) {
      ok_ = false;
      return false;
    }
    p_ += n;
    return true;
  }
  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

}  // namespace dist::collective::store
