#include "dist/distribute/batch_split.h"

#include <ATen/ATen.h>

#include "data/sharding/replica_rows.h"
#include "dist/core/error.h"

namespace dist {

std::vector<int64_t> split_sizes(int64_t global_batch_size, int num_replicas) {
  DIST_CHECK_ARG(num_replicas >= 1, "cannot split a batch across ", num_replicas, " replicas");
  DIST_CHECK_ARG(global_batch_size >= 0, "batch size must be at least 0, got ", global_batch_size);
  std::vector<int64_t> sizes(static_cast<size_t>(num_replicas));
  for (int r = 0; r < num_replicas; ++r)
    sizes[static_cast<size_t>(r)] =
        data::detail::first_row_of_replica(global_batch_size, r + 1, num_replicas) -
        data::detail::first_row_of_replica(global_batch_size, r, num_replicas);
  return sizes;
}

namespace {
int64_t batch_rows(const data::Element& batch) {
  DIST_CHECK_ARG(!batch.empty(), "cannot split an element with no tensors");
  int64_t rows = batch[0].dim() > 0 ? batch[0].size(0) : -1;
  for (size_t k = 0; k < batch.size(); ++k) {
    DIST_CHECK_ARG(batch[k].dim() > 0 && batch[k].size(0) == rows, "batch component ", k,
                   " has shape ", batch[k].sizes(), " but component 0 has ", rows,
                   " rows; every component of a batch needs the same size in dimension 0");
  }
  return rows;
}
}  // namespace

std::vector<data::Element> split_batch(const data::Element& batch, int num_replicas) {
  auto sizes = split_sizes(batch_rows(batch), num_replicas);
  std::vector<data::Element> shares(sizes.size());
  int64_t start = 0;
  for (size_t r = 0; r < sizes.size(); ++r) {
    for (const auto& t : batch) shares[r].push_back(t.narrow(0, start, sizes[r]));
    shares[r].set_names(batch.shared_names());  // each replica reads share["name"] too
    start += sizes[r];
  }
  return shares;
}

data::Element batch_share(const data::Element& batch, int replica, int num_replicas) {
  auto sizes = split_sizes(batch_rows(batch), num_replicas);
  DIST_CHECK_ARG(replica >= 0 && replica < num_replicas, "replica ", replica,
                 " is out of range for ", num_replicas, " replicas");
  int64_t start = 0;
  for (int r = 0; r < replica; ++r) start += sizes[static_cast<size_t>(r)];
  data::Element share;
  for (const auto& t : batch)
    share.push_back(t.narrow(0, start, sizes[static_cast<size_t>(replica)]));
  share.set_names(batch.shared_names());
  return share;
}

}  // namespace dist
