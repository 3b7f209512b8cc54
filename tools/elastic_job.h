// dist-train's elastic job (--min-workers, docs/elastic.md): the custom loop or fit run as the
// generations of dist::run_elastic (dist/train/elastic.h), as a user's own loop would be.
#pragma once

#include <functional>
#include <ostream>

#include "dist/train/elastic.h"
#include "train_job.h"

namespace dist::tools {

// One generation's training on its started job: the custom loop or fit.
using GenerationTraining = std::function<TrainResult(JobSetup& job, ElasticContext& elastic)>;

// The elastic job (options.min_workers > 0), `train` once per generation; the chief writes
// progress to `chief_out`. Throws ElasticJobStopped (dist-train exits 5) naming the lost
// workers and the last committed step once fewer than --min-workers remain.
TrainResult run_elastic_training(const TrainOptions& options, std::ostream& chief_out,
                                 const GenerationTraining& train);

}  // namespace dist::tools
