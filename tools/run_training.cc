#include "run_training.h"

#include <chrono>

#include "dist/train/preemption.h"
#include "elastic_job.h"
#include "job_outputs.h"
#include "startup_signals.h"
#include "timeline_file.h"
#include "train_job.h"

namespace dist::tools {

using Clock = std::chrono::steady_clock;

TrainResult run_training(const TrainOptions& options, std::ostream& chief_out) {
  const auto job_start = Clock::now();
  // Before the timeline starts and before anything trains: no output may destroy a file or be
  // lost at the end (job_outputs.h).
  check_job_outputs(options);
  TimelineRecording timeline(options);
  if (options.loop == Loop::kFit) {
    if (options.min_workers == 0) return run_fit_training(options, chief_out);
    // fit's BackupAndRestore watches for signals itself, inside fit only; start_job and the
    // elastic job's waits watch their own (StopSignalsEndWaits).
    return run_elastic_training(options, chief_out, [&](JobSetup& job, ElasticContext& elastic) {
      return run_fit_generation(options, job, chief_out, job_start, elastic);
    });
  }
  // From the start: a SIGTERM during the start-up's waits ends them (StopRequested: exit 4);
  // one after them stops the job after its first step, resumably.
  PreemptionWatcher preemption;
  end_early_stop_watch("loading (before the job started)");  // `preemption` watches from here
  if (options.min_workers > 0)
    return run_elastic_training(options, chief_out, [&](JobSetup& job, ElasticContext& elastic) {
      return run_custom_loop(options, job, preemption, chief_out, job_start, &elastic);
    });
  JobSetup job = start_job(options, chief_out);
  return run_custom_loop(options, job, preemption, chief_out, job_start, nullptr);
}

}  // namespace dist::tools
