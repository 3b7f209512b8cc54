// Rewriting a pipeline for one worker: its file sources sharded (AutoShardPolicy::kFile) and
// its global batch divided among the workers.
#include "data/sharding/file_shard.h"

#include "data/dataset_node.h"
#include "dist/core/error.h"
#include "dist/data/files.h"

namespace dist::data {
namespace {

// Visits every stage below `node` (inputs first); `change` returns a replacement or null.
detail::NodePtr rewrite(const detail::NodePtr& node,
                        const std::function<detail::NodePtr(const detail::DatasetNode&)>& change) {
  if (auto replacement = change(*node)) return replacement;
  auto inputs = node->inputs();
  bool changed = false;
  for (auto& input : inputs) {
    auto rewritten = rewrite(input, change);
    changed = changed || rewritten != input;
    input = std::move(rewritten);
  }
  return changed ? node->with_inputs(std::move(inputs)) : node;
}

}  // namespace

int64_t source_file_count(const Dataset& dataset) {
  int64_t files = -1;
  rewrite(dataset.node(), [&](const detail::DatasetNode& node) -> detail::NodePtr {
    if (const auto* source = dynamic_cast<const detail::FileSourceNode*>(&node))
      files = std::max<int64_t>(files, 0) + static_cast<int64_t>(source->files().size());
    return nullptr;
  });
  return files;
}

Dataset shard_files(const Dataset& dataset, int64_t num_shards, int64_t index) {
  DIST_CHECK_ARG(num_shards >= 1 && index >= 0 && index < num_shards, "shard_files: index ", index,
                 " is out of range for ", num_shards, " shards");
  bool found = false;
  auto sharded = rewrite(dataset.node(), [&](const detail::DatasetNode& node) -> detail::NodePtr {
    const auto* source = dynamic_cast<const detail::FileSourceNode*>(&node);
    if (source == nullptr) return nullptr;
    found = true;
    const auto& files = source->files();
    DIST_CHECK_ARG(static_cast<int64_t>(files.size()) >= num_shards,
                   "sharding by file: ", node.describe(), " reads ", files.size(), " file",
                   files.size() == 1 ? "" : "s", " but there are ", num_shards,
                   " workers (input pipelines), so some would read nothing; write the data in "
                   "at least ",
                   num_shards, " files, or shard by data (AutoShardPolicy::kData)");
    std::vector<std::string> mine;
    for (size_t f = static_cast<size_t>(index); f < files.size(); f += num_shards)
      mine.push_back(files[f]);
    return source->with_files(std::move(mine));
  });
  DIST_CHECK_ARG(found,
                 "sharding by file needs a pipeline that reads files (list_files, "
                 "tfrecord_dataset, image_folder); ",
                 dataset.describe(), " reads none: shard by data instead (AutoShardPolicy::kData)");
  return Dataset(sharded);
}

namespace detail {

Dataset divide_global_batch(const Dataset& dataset, int64_t num_workers) {
  bool done = false;
  auto divided = rewrite(dataset.node(), [&](const DatasetNode& node) -> NodePtr {
    // batch() or padded_batch(): each worker pads its own rows (to their longest, where a
    // padded shape says -1).
    const auto* batch = dynamic_cast<const BatchingStage*>(&node);
    if (batch == nullptr || done) return nullptr;
    done = true;  // the batch nearest the output is the global one
    const int64_t size = batch->rows_per_batch();
    DIST_CHECK_ARG(size % num_workers == 0, "sharding by file: the global batch (", size,
                   ") does not divide among the ", num_workers,
                   " workers, each of which batches its own files; choose a multiple of ",
                   num_workers);
    return batch->with_rows_per_batch(size / num_workers);
  });
  DIST_CHECK_ARG(done, "sharding by file: ", dataset.describe(),
                 " has no batch() or padded_batch() to divide among the workers; "
                 "experimental_distribute_dataset takes a dataset of global batches (for "
                 "bucket_by_sequence_length, shard by data: AutoShardPolicy::kData)");
  return Dataset(divided);
}

}  // namespace detail
}  // namespace dist::data
