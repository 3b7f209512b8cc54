// A MirroredStrategy of CPU replicas for the tests that compare replica counts.
#pragma once

#include <string>

#include "dist/distribute/mirrored_strategy.h"

namespace dist::testing {

// `n` replicas ("cpu:0" ... "cpu:n-1"), one intra-op thread each.
inline MirroredStrategy cpu_replicas(int n) {
  MirroredOptions options;
  for (int r = 0; r < n; ++r) options.devices.push_back("cpu:" + std::to_string(r));
  options.threads_per_replica = 1;
  return MirroredStrategy(options);
}

}  // namespace dist::testing
