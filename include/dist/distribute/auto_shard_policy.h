// How a multi-worker job divides its input among the workers (tf.data's AutoShardPolicy).
#pragma once

namespace dist {

enum class AutoShardPolicy {
  // kData here: datasets in this library are built from tensors, not file lists.
  kAuto,
  // Shard by input files; needs a dataset read from a list of files (not available yet:
  // using it is an InvalidArgument that says to use kData).
  kFile,
  // Every worker iterates the same pipeline and keeps the rows of each global batch that
  // belong to its replicas: N replicas anywhere see exactly what one device would.
  kData,
  // No sharding: every worker splits each whole batch across its own replicas, so the
  // workers train on the same examples and a step's global batch is workers x batch.
  kOff,
};

}  // namespace dist
