// A stranger at a rendezvous store's port, without the job token, doing what costs it nothing:
// it holds idle connections (from several source addresses of 127.0.0.0/8, as a host with many
// addresses would), opens again each one the store closes, and opens and closes a stream of
// more (some silent, some random bytes, some a hello with a wrong token). Issue 68's probe held
// 1,100 of them, reopened as they were closed, and no job could form. Used by
// tests/collective/store_test.cc and tests/tools/dist_train_stranger_test.cc.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collective/store/store_protocol.h"

namespace dist::testing {

// Raises this process's soft limit of open files to its hard limit (a stranger's connections,
// and a store's, are descriptors) and returns the limit now in force.
inline rlim_t raise_open_file_limit() {
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  return files.rlim_cur;
}

struct StoreStrangerOptions {
  int port = 0;  // the store's, on 127.0.0.1
  int held = 1100;
  // Source addresses 127.0.0.1 .. 127.0.0.<addresses> for the held connections, in turn (the
  // passing ones all come from 127.0.0.1, as the workers of a one-host job do).
  int addresses = 1;
  int passing = 3000;  // opened and closed once all are held
  bool reopen = true;  // open again each held connection the store closes
};

class StoreStranger {
 public:
  explicit StoreStranger(StoreStrangerOptions options)
      : options_(options), held_(static_cast<size_t>(options.held), -1) {
    thread_ = std::thread([this] { run(); });
  }
  ~StoreStranger() {
    stop_ = true;
    thread_.join();
    for (int fd : held_)
      if (fd >= 0) close(fd);
  }
  StoreStranger(const StoreStranger&) = delete;
  StoreStranger& operator=(const StoreStranger&) = delete;

  // Connections made so far, held and passing; whether every held one was open at least once;
  // whether the passing ones are done.
  int64_t opened() const { return opened_; }
  bool holding() const { return holding_; }
  bool passed() const { return passed_; }
  // The passing connections made so far.
  int passing_done() const { return passing_done_; }
  // Waits until holding() (false after `timeout`).
  bool wait_until_holding(std::chrono::milliseconds timeout) const {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!holding_ && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return holding_;
  }

 private:
  // A connection from 127.0.0.<source> within 100 ms, or -1 (nothing listens yet, or the SYN
  // went unanswered: a stranger does not wait for the retransmission a second later).
  int connect_from(int source) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    const int on = 1;
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof(on));
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl(0x7f000000u + static_cast<uint32_t>(source));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(options_.port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) == 0;
    if (ok && connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
      pollfd p{fd, POLLOUT, 0};
      int error = ETIMEDOUT;
      socklen_t length = sizeof(error);
      ok = errno == EINPROGRESS && poll(&p, 1, 100) == 1 &&
           getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
    }
    if (!ok) {
      close(fd);
      return -1;
    }
    ++opened_;
    return fd;
  }

  int source_of(size_t i) const { return 1 + static_cast<int>(i) % options_.addresses; }

  // Opens the held connections that are not open; true when all are. Stops at the first that
  // fails (nothing listens yet).
  bool open_missing() {
    for (size_t i = 0; i < held_.size() && !stop_; ++i) {
      if (held_[i] < 0) held_[i] = connect_from(source_of(i));
      if (held_[i] < 0) return false;
    }
    return !stop_;
  }

  // Closes the held connections the store closed (to be opened again).
  void forget_closed() {
    std::vector<pollfd> fds;
    for (int fd : held_) fds.push_back({fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), 0) <= 0) return;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      char c;
      if (recv(held_[i], &c, 1, MSG_DONTWAIT) > 0) continue;  // the store wrote: keep it
      close(held_[i]);
      held_[i] = -1;
    }
  }

  void pass_once(std::mt19937& random, int n) {
    const int fd = connect_from(1);
    if (fd < 0) return;
    std::vector<uint8_t> bytes;
    if (n % 3 == 1) {  // random bytes
      bytes.resize(4 + random() % 200);
      for (auto& b : bytes) b = static_cast<uint8_t>(random());
    } else if (n % 3 == 2) {  // a well-formed hello with a token of its own
      bytes = collective::store::Writer()
                  .u8(static_cast<uint8_t>(collective::store::Op::kHello))
                  .str(collective::store::kMagic)
                  .u32(collective::store::kVersion)
                  .str("a-guessed-token-" + std::to_string(random()))
                  .str("")
                  .frame();
    }
    if (!bytes.empty()) send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    close(fd);
  }

  void run() {
    std::mt19937 random(68);
    while (!stop_ && !open_missing()) {  // retried until the store listens
      forget_closed();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    holding_ = true;
    for (int n = 0; n < options_.passing && !stop_; ++n, ++passing_done_) {
      pass_once(random, n);
      if (options_.reopen && n % 200 == 199) {
        forget_closed();
        open_missing();
      }
    }
    passed_ = true;
    while (!stop_) {
      if (options_.reopen) {
        forget_closed();
        open_missing();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  const StoreStrangerOptions options_;
  std::vector<int> held_;  // the stranger's thread only, until it ends
  std::atomic<bool> stop_{false};
  std::atomic<bool> holding_{false};
  std::atomic<bool> passed_{false};
  std::atomic<int64_t> opened_{0};
  std::atomic<int> passing_done_{0};
  std::thread thread_;
};

}  // namespace dist::testing
