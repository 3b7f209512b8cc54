// Replicas as threads, without a strategy: for the tests of what runs inside a replica (losses,
// metrics), which need a ReplicaContext but not a whole MirroredStrategy.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "collective/local/local_communicator.h"
#include "dist/distribute/replica_context.h"

namespace dist::testing {

// Runs fn(replica) concurrently on one thread per replica, each in its own ReplicaContext of
// one local group, as strategy.run() would; rethrows the first replica's exception.
// `global_batch_size` is what the context reports (-1: none given).
inline void run_replicas(int replicas, int64_t global_batch_size,
                         const std::function<void(int)>& fn) {
  collective::LocalGroupOptions options;
  options.size = replicas;
  auto group = collective::make_local_group(options);
  std::vector<std::exception_ptr> errors(replicas);
  std::vector<std::thread> threads;
  for (int r = 0; r < replicas; ++r) {
    threads.emplace_back([&, r] {
      ReplicaContext context(nullptr, group[static_cast<size_t>(r)].get(), r, global_batch_size);
      ReplicaContextScope scope(&context);
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

inline void run_replicas(int replicas, const std::function<void(int)>& fn) {
  run_replicas(replicas, -1, fn);
}

}  // namespace dist::testing
