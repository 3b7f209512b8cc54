// How values from several replicas (or along an axis) are combined.
#pragma once

#include <string>

namespace dist {

// Names follow tf.distribute.ReduceOp. kMean divides the sum by the number of replicas
// (or, with an axis, by the total number of elements along that axis across replicas).
enum class ReduceOp { kSum, kMean, kMin, kMax };

// "SUM", "MEAN", "MIN", "MAX".
std::string to_string(ReduceOp op);

// Parses "sum"/"SUM", "mean", "min", "max"; throws InvalidArgument for anything else.
ReduceOp parse_reduce_op(const std::string& name);

}  // namespace dist
