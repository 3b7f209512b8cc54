// dist-train's job as its flags choose it: the custom loop or fit, elastic or not.
#pragma once

#include <ostream>

#include "train_options.h"
#include "train_result.h"

namespace dist::tools {

// Runs the job; the chief writes human-readable progress to `chief_out`. Throws dist::Error on
// bad options or data, CollectiveError when a worker is lost (an elastic job: ElasticJobStopped
// when fewer than --min-workers remain).
TrainResult run_training(const TrainOptions& options, std::ostream& chief_out);

}  // namespace dist::tools
