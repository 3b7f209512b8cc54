// How a multi-worker job divides its input among the workers (tf.data's AutoShardPolicy). Set
// on a dataset (Dataset::with_options, as tf.data's options.experimental_distribute) or in
// DistributeOptions; docs/guide.md ("Input pipelines from files") says what each guarantees.
#pragma once

namespace dist::data {

enum class AutoShardPolicy {
  // kFile where the pipeline reads files (list_files, tfrecord_dataset, image_folder), kData
  // otherwise, as tf.data decides. A file pipeline with fewer files than workers is an error
  // (as in tf.data): choose kData explicitly for it.
  kAuto,
  // Worker i reads files i, i + N, ... of each file source and batches them itself, the global
  // batch divided by the N workers: every example is read once per epoch by one worker, nothing
  // is read twice, but a step's global batch is not the one one device would see, and the
  // workers' inputs may end at different steps (the others get empty batches until all end).
  kFile,
  // Every worker iterates the same pipeline and keeps the rows of each global batch that
  // belong to its replicas: N replicas anywhere see exactly what one device would.
  kData,
  // No sharding: every worker splits each whole batch across its own replicas, so the
  // workers train on the same examples and a step's global batch is workers x batch.
  kOff,
};

}  // namespace dist::data

namespace dist {
// Where it lived before it joined its folder's namespace: existing code keeps compiling.
using data::AutoShardPolicy;
}  // namespace dist
