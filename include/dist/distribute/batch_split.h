// How a global batch is split across replicas.
//
// B examples over R replicas: replica r gets B/R examples, plus one more if r < B % R, taken in
// order. So sizes differ by at most one, and a replica may get zero examples; it still takes
// part in every collective of the step (distributed_dataset.h says how an epoch ends unevenly).
#pragma once

#include <cstdint>
#include <vector>

#include "dist/data/dataset.h"

namespace dist {

// Sizes of each replica's share: for (10, 4) returns {3, 3, 2, 2}.
std::vector<int64_t> split_sizes(int64_t global_batch_size, int num_replicas);

// Slices every component of `batch` along dimension 0 into the shares of split_sizes.
// The slices are views of the global batch, not copies.
std::vector<data::Element> split_batch(const data::Element& batch, int num_replicas);

// The share of replica `replica` (as split_batch would give it).
data::Element batch_share(const data::Element& batch, int replica, int num_replicas);

}  // namespace dist
