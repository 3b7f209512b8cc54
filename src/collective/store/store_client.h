// StoreClient: a c10d::Store (what ProcessGroupGloo's rendezvous takes) that talks to a
// StoreServer. One connection; calls from several threads take turns.
//
// Unlike LibTorch 1.13's TCPStore client, it has no background thread: when the server goes
// away, the next call throws CollectiveError naming the store's address, and nothing aborts the
// process.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "collective/store/store_protocol.h"
#include "dist/core/host_port.h"

namespace dist::collective {

class StoreClient : public c10d::Store {
 public:
  // Connects to `at`, retrying until `timeout` has passed (the server may start later), and
  // says hello with `job_token`. `timeout` is also how long get() and wait() wait for keys.
  // Throws CollectiveError naming the address (and, when the server refuses the token, saying
  // so).
  //
  // `key_scope`, when not empty, goes before every key this client names (the members of one
  // generation of an elastic job keep to "generation/<n>/"), except the keys of the store or of
  // a process rather than of a group: "closing" (set by the store's host) and those beginning
  // with kProcessKeyPrefix (the heartbeat's counter, which the host watches for the whole job).
  StoreClient(const HostPort& at, std::chrono::milliseconds timeout, const std::string& job_token,
              std::string key_scope = "");
  ~StoreClient() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  // Waits up to the timeout for the key.
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  const HostPort& address() const { return at_; }
  const std::string& key_scope() const { return key_scope_; }

  static constexpr const char* kProcessKeyPrefix = "alive/";

 private:
  struct Reply {
    store::Status status;
    store::Bytes body;  // after the status byte
  };
  // One request and its reply, within `deadline` from now.
  Reply call(const store::Writer& request, std::chrono::milliseconds deadline);
  void send_all(const store::Bytes& frame, std::chrono::steady_clock::time_point deadline);
  void receive(uint8_t* data, size_t size, std::chrono::steady_clock::time_point deadline);
  [[noreturn]] void fail(const std::string& why);
  std::string scoped(const std::string& key) const;

  HostPort at_;
  std::string key_scope_;
  std::mutex mu_;
  int fd_ = -1;
};

// Whether anything accepts a connection at `at`, in one attempt of at most `timeout` (a port
// nobody listens on refuses at once; the constructor would retry until its timeout).
bool store_listening(const HostPort& at, std::chrono::milliseconds timeout);

// Store values are bytes; the library's are text.
inline std::vector<uint8_t> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }
inline std::string to_text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

}  // namespace dist::collective
