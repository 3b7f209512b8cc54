#include "dist/collective/cross_device_ops.h"

#include "dist/core/error.h"

namespace dist {

std::string to_string(CrossDeviceOps ops) {
  switch (ops) {
    case CrossDeviceOps::kParallelAllReduce:
      return "parallel";
    case CrossDeviceOps::kReductionToOneDevice:
      return "reduction_to_one_device";
    case CrossDeviceOps::kHierarchicalCopy:
      return "hierarchical_copy";
  }
  DIST_INTERNAL_ASSERT(false, "unknown CrossDeviceOps");
}

CrossDeviceOps parse_cross_device_ops(const std::string& name) {
  for (auto ops : {CrossDeviceOps::kParallelAllReduce, CrossDeviceOps::kReductionToOneDevice,
                   CrossDeviceOps::kHierarchicalCopy})
    if (name == to_string(ops)) return ops;
  throw InvalidArgument("unknown cross-device ops '" + name +
                        "': use parallel, reduction_to_one_device or hierarchical_copy");
}

}  // namespace dist
