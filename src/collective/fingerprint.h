// What a collective is, as every member must agree before its data moves: the agreement of
// ProcessGroupSpec::check_collectives (agreement.h for transports, shm/ for shared memory).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/core/reduce_op.h"

namespace dist::collective {

struct Fingerprint {
  int64_t kind = 0;  // which collective (and its ReduceOp or root): the k* codes below
  int64_t elements = 0;
  int64_t dtype = 0;    // at::ScalarType
  int64_t tensors = 0;  // reduce_scatter: rows (dim 0), which decide the chunks

  bool operator==(const Fingerprint& o) const {
    return kind == o.kind && elements == o.elements && dtype == o.dtype && tensors == o.tensors;
  }
};

// Kinds: the collective in the low 4 bits, its ReduceOp or root above them (so any root of any
// group size stays apart from the other collectives).
inline int64_t all_reduce_kind(ReduceOp op) { return 1 + 16 * static_cast<int64_t>(op); }
inline int64_t broadcast_kind(int root) { return 2 + 16 * int64_t{root}; }
constexpr int64_t kAllGatherSizesKind = 3;
constexpr int64_t kAllGatherKind = 4;
constexpr int64_t kBarrierKind = 5;
inline int64_t reduce_scatter_kind(ReduceOp op) { return 6 + 16 * static_cast<int64_t>(op); }

inline int64_t total_elements(const std::vector<at::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

// The fingerprint of a collective over `tensors` (an empty list: dtype 0).
inline Fingerprint fingerprint_of(int64_t kind, const std::vector<at::Tensor>& tensors) {
  return {kind, total_elements(tensors),
          tensors.empty() ? 0 : static_cast<int64_t>(tensors[0].scalar_type()),
          static_cast<int64_t>(tensors.size())};
}

// "all_reduce SUM of 4 Long values in 1 tensor", for mismatch reports.
std::string describe(const Fingerprint& f);

}  // namespace dist::collective
