#include "dist/core/reduce_op.h"

#include <algorithm>
#include <cctype>

#include "dist/core/error.h"

namespace dist {

std::string to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "SUM";
    case ReduceOp::kMean:
      return "MEAN";
    case ReduceOp::kMin:
      return "MIN";
    case ReduceOp::kMax:
      return "MAX";
  }
  DIST_INTERNAL_ASSERT(false, "unknown ReduceOp ", static_cast<int>(op));
}

ReduceOp parse_reduce_op(const std::string& name) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (upper == "SUM") return ReduceOp::kSum;
  if (upper == "MEAN") return ReduceOp::kMean;
  if (upper == "MIN") return ReduceOp::kMin;
  if (upper == "MAX") return ReduceOp::kMax;
  throw InvalidArgument("unknown reduce op '" + name + "': use SUM, MEAN, MIN or MAX");
}

}  // namespace dist
