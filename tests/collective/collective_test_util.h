// Helpers of the collective layer's tests: run N members as threads, integer data with an
// exact expected result.
#pragma once

#include <ATen/ATen.h>

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace dist::collective::testing {

// Runs fn(rank) on `n` threads and rethrows the first exception (in rank order).
inline void run_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Member `rank`'s tensor `t` of `elements` int64 values: (rank + 1) * (i + 1) + t.
inline at::Tensor member_tensor(int rank, int t, int64_t elements) {
  return at::arange(elements, at::kLong).add(1).mul(rank + 1).add(t);
}

// The element-wise sum of member_tensor over `size` members: (i + 1) * size(size+1)/2 + size*t.
inline at::Tensor expected_sum(int size, int t, int64_t elements) {
  return at::arange(elements, at::kLong).add(1).mul(size * (size + 1) / 2).add(size * t);
}

// The local addresses ("127.0.0.1:4242", "0.0.0.0:80", "[::]:80" for any IPv6 one) of every TCP
// socket this process listens on, read from /proc: which interfaces a server really bound.
inline std::vector<std::string> listening_addresses_of_this_process() {
  std::set<std::string> inodes;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (dirent* entry = readdir(dir)) {
      char target[256];
      const std::string link = std::string("/proc/self/fd/") + entry->d_name;
      const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      const std::string text(target, static_cast<size_t>(n));
      if (text.rfind("socket:[", 0) == 0) inodes.insert(text.substr(8, text.size() - 9));
    }
    closedir(dir);
  }
  std::vector<std::string> found;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state != "0A" || inodes.count(inode) == 0) continue;  // 0A: LISTEN
      const auto colon = local.find(':');
      const std::string host = local.substr(0, colon);
      const int port = std::stoi(local.substr(colon + 1), nullptr, 16);
      if (host.size() == 8) {  // IPv4, in the kernel's byte order
        const unsigned long v = std::stoul(host, nullptr, 16);
        found.push_back(std::to_string(v & 0xff) + "." + std::to_string((v >> 8) & 0xff) + "." +
                        std::to_string((v >> 16) & 0xff) + "." + std::to_string(v >> 24) + ":" +
                        std::to_string(port));
      } else {
        const bool any = host.find_first_not_of('0') == std::string::npos;
        found.push_back((any ? std::string("[::]") : "[" + host + "]") + ":" +
                        std::to_string(port));
      }
    }
  }
  return found;
}

}  // namespace dist::collective::testing
