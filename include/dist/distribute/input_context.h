// InputContext: what a per-replica input function needs to know to build its pipeline
// (tf.distribute.InputContext), for strategy.distribute_datasets_from_function.
#pragma once

#include <cstdint>

#include "dist/core/error.h"

namespace dist {

struct InputContext {
  // Input pipelines in the whole job (one per worker process) and this one's index.
  int num_input_pipelines = 1;
  int input_pipeline_id = 0;
  int num_replicas_in_sync = 1;

  // The batch each replica should get for a given global batch; the global batch must
  // divide evenly (a per-replica pipeline cannot split one remainder across replicas).
  int64_t get_per_replica_batch_size(int64_t global_batch_size) const {
    DIST_CHECK_ARG(global_batch_size % num_replicas_in_sync == 0, "global batch size ",
                   global_batch_size, " is not divisible by the ", num_replicas_in_sync,
                   " replicas in sync; choose a multiple of ", num_replicas_in_sync);
    return global_batch_size / num_replicas_in_sync;
  }
};

}  // namespace dist
