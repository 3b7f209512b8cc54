#include "train_result.h"

#include <nlohmann/json.hpp>

#include "dist/core/allocator.h"
#include "dist/core/blas_core.h"

namespace dist::tools {

std::string to_json_line(const TrainResult& r) {
  const OpenBlasCoreChoice blas = choose_openblas_core();
  nlohmann::json line{{"strategy", r.strategy},
                      {"num_replicas_in_sync", r.num_replicas_in_sync},
                      {"global_batch", r.global_batch},
                      {"epochs", r.epochs},
                      {"steps", r.steps},
                      {"seconds", r.seconds},
                      {"train_seconds", r.train_seconds},
                      {"images_per_sec", r.images_per_sec},
                      {"train_loss", r.train_loss},
                      {"test_loss", r.test_loss},
                      {"resumed_at_step", r.resumed_at_step},
                      {"interrupted", r.interrupted},
                      {"mixed_precision", r.mixed_precision},
                      {"bytes_sent_per_step", r.bytes_sent_per_step},
                      {"collectives",
                       {{"count", r.communication.collectives},
                        {"payload_bytes", r.communication.payload_bytes},
                        {"bytes_sent", r.communication.bytes_sent}}},
                      {"peak_rss_bytes", r.peak_rss_bytes},
                      {"worker_sizes", r.worker_sizes},
                      {"ignored_errors", r.ignored_errors},
                      // What the figures ran on: malloc decides speed (issue 13), and so
                      // do OpenBLAS's kernels ("" when the BLAS is another).
                      {"malloc", malloc_name()},
                      {"openblas_core", blas.now},
                      {"openblas_core_at_start", blas.was}};
  line["train_" + r.metric_name] = r.train_metric;
  line["test_" + r.metric_name] = r.test_metric;
  return line.dump();
}

}  // namespace dist::tools
