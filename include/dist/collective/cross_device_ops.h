// How replicas in one process combine tensors (gradients above all).
//
// All three give every replica the same result (the reduction is computed once and shared)
// and differ only in who adds what, so they agree with each other up to float summation
// order. See src/collective/local/local_group.cc for the algorithms.
#pragma once

#include <cstdint>
#include <string>

namespace dist {

enum class CrossDeviceOps {
  // Each replica thread reduces its 1/R share of the buffer across all replicas, then all
  // read the result (reduce-scatter then all-gather, in memory). The default on CPU.
  kParallelAllReduce,
  // Replica 0 reduces the whole buffer while the others wait (tf.distribute's
  // ReductionToOneDevice; CentralStorageStrategy's default).
  kReductionToOneDevice,
  // Replicas reduce in groups into their group leader, then the leaders' partial sums are
  // reduced (tf.distribute's HierarchicalCopyAllReduce).
  kHierarchicalCopy,
};

// "parallel", "reduction_to_one_device", "hierarchical_copy".
std::string to_string(CrossDeviceOps ops);
// Parses the names above; throws InvalidArgument otherwise.
CrossDeviceOps parse_cross_device_ops(const std::string& name);

}  // namespace dist
