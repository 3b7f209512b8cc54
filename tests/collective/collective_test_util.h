// Helpers of the collective layer's tests: run N members as threads, integer data with an
// exact expected result.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collective/communicator.h"
#include "collective/factory.h"
#include "collective/hierarchical_communicator.h"
#include "collective/local/local_communicator.h"
#include "dist/core/error.h"
#include "dist/distribute/local_cluster.h"
#include "multi_worker/process_group.h"

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

// Member `rank` of a group on 127.0.0.1 at `ports`, whose rank 0 hosts the store in process.
inline ProcessGroupSpec loopback_spec(int rank, const std::vector<int>& ports,
                                      std::chrono::milliseconds collective_timeout,
                                      bool check_collectives = true) {
  ProcessGroupSpec spec;
  spec.rank = rank;
  for (size_t p = 0; p < ports.size(); ++p)
    spec.members.push_back({"worker:" + std::to_string(p), {"127.0.0.1", ports[p]}});
  spec.store_address = spec.members[0].address;
  spec.collective_timeout = collective_timeout;
  spec.rendezvous_timeout = std::chrono::seconds(30);
  spec.store_in_process = true;
  spec.check_collectives = check_collectives;
  return spec;
}

// P Gloo members, formed in parallel (each blocks until all joined).
inline std::vector<std::unique_ptr<Communicator>> gloo_group(
    int processes, std::chrono::milliseconds timeout = std::chrono::seconds(30),
    bool check_collectives = true) {
  const auto ports = free_loopback_ports(processes);
  std::vector<std::unique_ptr<Communicator>> members(static_cast<size_t>(processes));
  run_threads(processes, [&](int p) {
    members[static_cast<size_t>(p)] =
        make_process_communicator("gloo", loopback_spec(p, ports, timeout, check_collectives));
  });
  return members;
}

// Rank 0 hosts the store: the others let go of it first (their next call would fail).
inline void release(std::vector<std::unique_ptr<Communicator>>& members) {
  for (size_t p = members.size(); p-- > 0;) members[p].reset();
}

struct World {
  std::vector<std::shared_ptr<HierarchicalGroup>> groups;  // one per process
  std::vector<std::unique_ptr<Communicator>> replicas;     // global rank order
  ~World() {
    replicas.clear();
    for (size_t p = groups.size(); p-- > 0;) groups[p].reset();
  }
};

inline std::unique_ptr<World> hierarchical_world(
    int processes, int local, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto gloo = gloo_group(processes, timeout);
  auto world = std::make_unique<World>();
  LocalGroupOptions options;
  options.size = local;
  options.timeout = timeout;
  for (auto& member : gloo)
    world->groups.push_back(std::make_shared<HierarchicalGroup>(options, std::move(member)));
  for (auto& group : world->groups)
    for (int l = 0; l < local; ++l) world->replicas.push_back(group->member(l));
  return world;
}

// `size` Gloo members on 127.0.0.1, each made on its own thread, composed with a shared-memory
// segment of 64-byte slots (so every collective above 16 floats travels in several parts)
// unless `shared_memory` is false.
inline std::vector<std::unique_ptr<Communicator>> same_host_group(
    int size, std::chrono::milliseconds timeout = std::chrono::seconds(30),
    bool shared_memory = true) {
  const auto ports = free_loopback_ports(size);
  std::vector<std::unique_ptr<Communicator>> members(static_cast<size_t>(size));
  run_threads(size, [&](int r) {
    ProcessGroupSpec spec = loopback_spec(r, ports, timeout);
    spec.same_host_shared_memory = shared_memory;
    spec.shared_memory_slot_bytes = 64;
    members[static_cast<size_t>(r)] = make_process_communicator("gloo", spec);
  });
  return members;
}

// Member `rank`'s tensor `t` of `elements` int64 values: (rank + 1) * (i + 1) + t.
inline at::Tensor member_tensor(int rank, int t, int64_t elements) {
  return at::arange(elements, at::kLong).add(1).mul(rank + 1).add(t);
}

// The element-wise sum of member_tensor over `size` members: (i + 1) * size(size+1)/2 + size*t.
inline at::Tensor expected_sum(int size, int t, int64_t elements) {
  return at::arange(elements, at::kLong).add(1).mul(size * (size + 1) / 2).add(size * t);
}

// The local addresses of every TCP socket this process listens on (see listening_addresses_of).
inline std::vector<std::string> listening_addresses_of_this_process() {
  return dist::testing::listening_addresses_of(getpid());
}

// Member 1 of `members` (two) aborts with a reason while member 0 waits in an all_reduce:
// member 0's error names member 1 and the reason, within seconds rather than at a timeout.
inline void expect_abort_named_at_once(std::vector<std::unique_ptr<Communicator>>& members) {
  const auto start = std::chrono::steady_clock::now();
  run_threads(2, [&](int p) {
    if (p == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      members[1]->abort("cannot read its data directory");
      return;
    }
    std::vector<at::Tensor> t{member_tensor(0, 0, 4)};
    try {
      members[0]->all_reduce(t, ReduceOp::kSum)->wait();
      ADD_FAILURE() << "all_reduce completed without worker:1";
    } catch (const CollectiveError& e) {
      EXPECT_NE(std::string(e.what()).find("worker:1 (127.0.0.1:"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("failed: cannot read its data directory"),
                std::string::npos)
          << e.what();
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// Two members issue all_reduces of different sizes: both get a named error saying what each
// issued, instead of a transport abort.
inline void expect_mismatch_named(std::vector<std::unique_ptr<Communicator>>& members) {
  run_threads(2, [&](int p) {
    std::vector<at::Tensor> t{member_tensor(p, 0, p == 0 ? 4 : 1000)};
    try {
      members[static_cast<size_t>(p)]->all_reduce(t, ReduceOp::kSum)->wait();
      ADD_FAILURE() << "mismatched all_reduce completed";
    } catch (const CollectiveError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("collective mismatch at collective #1"), std::string::npos) << message;
      EXPECT_NE(message.find("worker:0 (127.0.0.1:"), std::string::npos) << message;
      EXPECT_NE(message.find("issued all_reduce SUM of 4 Long values"), std::string::npos)
          << message;
      EXPECT_NE(message.find("issued all_reduce SUM of 1000 Long values"), std::string::npos)
          << message;
    }
  });
}

}  // namespace dist::collective::testing
