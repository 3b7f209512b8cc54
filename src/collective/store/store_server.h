// StoreServer: the rendezvous store of a multi-worker job, a key-value map served over TCP
// (store_protocol.h) by one thread. It binds exactly the address it is given, never the
// wildcard, and refuses a message longer than store::kMaxFrameBytes from its declared length,
// before allocating it. It serves until destroyed.
//
// With a job token, a connection must present it in its hello before it can read or write
// anything; a wrong token, a malformed hello, or silence for store::kHelloTimeoutMs closes the
// connection and is recorded (refused_connections(), and the log under store::kRefusalLogKey)
// while every other client goes on undisturbed.
//
// Strangers cannot crowd members out: connections that have not said hello yet give way to
// newer ones (at most store::kMaxWaitingPerAddress per address; when the table of
// store::kMaxConnections is full, or the process has no file descriptor left, the one that has
// waited longest is closed), and members that said hello keep their place. With nothing left to
// close, the server stops accepting for 100 ms instead of spinning on the listener.
//
// It does not depend on LibTorch or the rest of the library: dist-store-host (tools/) compiles
// it in directly.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collective/store/store_protocol.h"
#include "dist/core/host_port.h"

namespace dist::collective {

struct StoreConnection;  // one connection of the table (store_connection.h)

class StoreServer {
 public:
  // Binds at.host (a name or a numeric address; its first IPv4 or IPv6 address) and at.port (0: any
  // free port). Throws std::runtime_error saying why it cannot (port in use, unknown host).
  // `job_token`: what every client's hello must carry (compared in constant time); empty: a job
  // without a token, whose clients send an empty one. `job_id`: the job's identity
  // (job_id_from_environment); a hello with another non-empty one is answered kNotThisJob, as is
  // one with a wrong token once the store is closing (store::kClosingKey is set).
  explicit StoreServer(const HostPort& at, std::string job_token = "", std::string job_id = "");
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // The bound address, with the actual port.
  const HostPort& address() const { return address_; }

  // Direct access for the process that hosts the server (dist-store-host's exit rule).
  bool check(const std::string& key) const;
  int64_t add(const std::string& key, int64_t delta);
  void set(const std::string& key, const std::string& value);
  // Whether store::kClosingKey is set: the job has ended.
  bool closing() const;

  // What was turned away, for tests and diagnosis: connections that did not open with the
  // protocol's hello, were closed to make room before their hello, or came when the table was
  // full of members; and requests that were malformed or declared more than the limits.
  int64_t refused_connections() const { return refused_connections_; }
  int64_t refused_requests() const { return refused_requests_; }

 private:
  using Client = StoreConnection;
  void serve();
  void accept_clients();
  // Takes a connection just accepted from `peer` into the table (making room), or closes it.
  void admit(int fd, const sockaddr_storage& peer);
  // Makes room for one more connection from `address`; false when the table is full of members.
  bool make_room(const std::string& address);
  // Closes the connection that has waited longest for its hello (of `address`, if not null),
  // logging `why`; false when no connection waits.
  bool close_oldest_waiting(const std::string* address, const std::string& why);
  // Reads what arrived; false when the client is to be dropped.
  bool read_from(Client& client);
  bool handle_frames(Client& client);
  // One request; false drops the connection (a malformed request, a refused hello).
  bool handle(Client& client, const uint8_t* body, size_t size);
  bool greet(Client& client, store::Op op, store::Reader& in);
  // With mu_ held: answers a well-formed request into client.out (a wait: later).
  bool answer(Client& client, store::Op op, store::Reader& in);
  bool add(Client& client, store::Reader& in);
  bool compare_set(Client& client, store::Reader& in);
  bool flush(Client& client);
  void answer_waits();
  // Counts and logs a refused connection (under kRefusalLogKey); the caller drops it.
  void refuse(const std::string& peer, const std::string& why);
  void close_silent_clients();

  HostPort address_;
  std::string job_token_;
  std::string job_id_;
  int listener_ = -1;
  int wake_[2] = {-1, -1};  // the destructor writes here to stop serve()
  std::thread thread_;
  mutable std::mutex mu_;  // guards data_ (serve() and the direct access)
  std::map<std::string, std::vector<uint8_t>> data_;
  std::vector<std::unique_ptr<Client>> clients_;  // serve()'s thread only, oldest first
  // serve()'s thread only: until then the listener is not polled (accept failed with nothing
  // to close for room: polling it would return at once, every time).
  std::chrono::steady_clock::time_point accept_paused_until_;
  std::atomic<int64_t> refused_connections_{0};
  std::atomic<int64_t> refused_requests_{0};
  std::vector<std::string> refusal_log_;  // under mu_: the last kRefusalLogLines lines
};

}  // namespace dist::collective
