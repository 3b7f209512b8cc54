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

#include "collective/store/job_store.h"
#include "collective/store/store_protocol.h"
#include "dist/core/error.h"
#include "dist/core/host_port.h"

namespace dist::collective {

// The store at an address answered that it is not this job's: it belongs to a job of another
// identity, or its job has ended and it is closing (store::Status::kNotThisJob). The caller
// leaves it and waits for its own job's store, which comes once that one's host has exited.
class StoreOfAnotherJob : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

// The store refused this process's hello: a wrong or missing job token, or another protocol
// version.
class StoreRefused : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

class StoreClient : public JobStore {
 public:
  // Connects to `at` and says hello with `job_token` and `job_id`
  // (dist/distribute/cluster_resolver.h), retrying until `timeout` has passed while nothing
  // listens there (the server may start later) or the server closes the connection before
  // answering the hello (strangers' connections may fill it: docs/security.md). `timeout` is
  // also how long get() and wait() wait for keys. Throws CollectiveError naming the address and
  // what the last attempt met, StoreRefused
  // when the server refuses the token (saying so), StoreOfAnotherJob when the store is another
  // job's, and StopRequested once a stop signal is pending (core/stop_request.h): every wait, here
  // and in get() and wait(), looks for one at least four times a second.
  //
  // `key_scope`, when not empty, goes before every key this client names (scoped_key,
  // job_store.h).
  // `stop_on_signal` false: the connection is made even while a stop is pending (to say that
  // this member leaves, on the way out).
  StoreClient(const HostPort& at, std::chrono::milliseconds timeout, const std::string& job_token,
              std::string key_scope = "", const std::string& job_id = "",
              bool stop_on_signal = true);
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
  std::string where() const override { return "the rendezvous store at " + at_.to_string(); }
  const std::string& key_scope() const override { return key_scope_; }

 private:
  struct Reply {
    store::Status status;
    store::Bytes body;  // after the status byte
  };
  // One request and its reply, within `deadline` from now.
  Reply call(const store::Writer& request, std::chrono::milliseconds deadline);
  // The hello on a new connection fd_, answered by `deadline`: true once admitted; false (fd_
  // closed, last_failure_ set) when the connection ended or went unanswered; throws
  // StoreRefused or StoreOfAnotherJob when refused.
  bool say_hello(const std::string& job_token, const std::string& job_id,
                 std::chrono::steady_clock::time_point deadline);
  // One kWait of at most `slice`: whether every key exists.
  bool wait_once(const std::vector<std::string>& keys, std::chrono::milliseconds slice);
  void send_all(const store::Bytes& frame, std::chrono::steady_clock::time_point deadline);
  void receive(uint8_t* data, size_t size, std::chrono::steady_clock::time_point deadline);
  [[noreturn]] void fail(const std::string& why);
  std::string scoped(const std::string& key) const { return scoped_key(key_scope_, key); }

  HostPort at_;
  std::string key_scope_;
  std::mutex mu_;
  int fd_ = -1;
  std::string last_failure_;  // why fail() last closed the connection
};

// Says that member `name` left the job at `at` on purpose ("left/<name>": its heartbeat counter
// now), so that the store's host need not wait for its beat to go stale; within `timeout`, a
// stop signal pending or not. False when the store is unreachable or refuses this process.
bool say_left(const HostPort& at, const std::string& job_token, const std::string& job_id,
              const std::string& name, std::chrono::milliseconds timeout) noexcept;

// Whether anything accepts a connection at `at`, in one attempt of at most `timeout` (a port
// nobody listens on refuses at once; the constructor would retry until its timeout).
bool store_listening(const HostPort& at, std::chrono::milliseconds timeout);

}  // namespace dist::collective
