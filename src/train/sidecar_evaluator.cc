#include "dist/train/sidecar_evaluator.h"

#include <optional>
#include <thread>
#include <utility>

#include "dist/core/error.h"
#include "dist/train/summary_writer.h"

namespace dist {

namespace {

using Clock = std::chrono::steady_clock;

std::string seconds_text(std::chrono::milliseconds duration) {
  return detail::concat(duration.count() / 1000.0, " s");
}

// now + timeout, saturated: a timeout of centuries means "no limit", not an overflow into the
// past.
Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  const auto now = Clock::now();
  const auto room =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
  return timeout >= room ? Clock::time_point::max() : now + timeout;
}

}  // namespace

SidecarEvaluator::SidecarEvaluator(Checkpoint checkpoint, Evaluate evaluate,
                                   SidecarEvaluatorOptions options)
    : checkpoint_(std::move(checkpoint)),
      evaluate_(std::move(evaluate)),
      options_(std::move(options)) {
  DIST_CHECK_ARG(!options_.checkpoint_dir.empty(),
                 "SidecarEvaluator: checkpoint_dir is empty; give the directory the chief's "
                 "CheckpointManager writes to");
  DIST_CHECK_ARG(evaluate_ != nullptr, "SidecarEvaluator: no evaluate function");
  DIST_CHECK_ARG(options_.final_step == -1 || options_.final_step >= 1,
                 "SidecarEvaluator: final_step must be at least 1, or -1 for none, got ",
                 options_.final_step);
  DIST_CHECK_ARG(options_.max_evaluations == -1 || options_.max_evaluations >= 1,
                 "SidecarEvaluator: max_evaluations must be at least 1, or -1 for no limit, got ",
                 options_.max_evaluations);
  DIST_CHECK_ARG(options_.timeout.count() > 0 && options_.poll_interval.count() > 0,
                 "SidecarEvaluator: timeout and poll_interval must be positive");
  DIST_CHECK_ARG(options_.env != nullptr, "SidecarEvaluator: env is null");
  // The evaluator's own random stream is its own: restoring the chief's would not change what
  // an evaluation in eval mode computes, and would surprise a caller that samples.
  checkpoint_.save_random_state = false;
}

std::vector<Evaluation> SidecarEvaluator::run(
    const std::function<void(const Evaluation&)>& on_evaluation) {
  // The manager only reads the pointer file here (and creates the directory, so an evaluator
  // that starts before the chief has something to watch).
  CheckpointManager manager(options_.checkpoint_dir, /*max_to_keep=*/1, options_.env);
  std::optional<SummaryWriter> writer;
  if (!options_.log_dir.empty()) writer.emplace(options_.log_dir, options_.env);

  std::vector<Evaluation> evaluations;
  std::string last_read;
  auto deadline = deadline_after(options_.timeout);
  while (true) {
    const std::optional<std::string> latest = manager.latest();
    if (latest && *latest != last_read) {
      try {
        checkpoint_.read(*latest, options_.env);
      } catch (const DataError&) {
        // Deleted by the chief's max_to_keep (or replaced) between the pointer and the read:
        // a newer one is there to take instead. Still the latest: the file itself is bad.
        if (manager.latest() != latest) continue;
        throw;
      }
      last_read = *latest;
      Evaluation evaluation;
      evaluation.checkpoint = *latest;
      evaluation.step = checkpoint_.state.step;
      evaluation.metrics = evaluate_();
      if (writer) {
        for (const auto& [name, value] : evaluation.metrics)
          writer->scalar("evaluation_" + name + "_vs_iterations", value, evaluation.step);
        writer->flush();
      }
      evaluations.push_back(evaluation);
      if (on_evaluation) on_evaluation(evaluation);
      if (options_.final_step > 0 && evaluation.step >= options_.final_step) return evaluations;
      if (options_.max_evaluations > 0 &&
          static_cast<int64_t>(evaluations.size()) >= options_.max_evaluations)
        return evaluations;
      deadline = deadline_after(options_.timeout);
      continue;  // a newer checkpoint may have come while this one was evaluated
    }
    if (Clock::now() >= deadline) {
      if (options_.final_step < 0 && options_.max_evaluations < 0) return evaluations;
      throw DataError(detail::concat(
          "SidecarEvaluator: no new checkpoint in ", options_.checkpoint_dir, " for ",
          seconds_text(options_.timeout), " (",
          evaluations.empty()
              ? std::string("none evaluated yet")
              : "the last evaluated is at step " + std::to_string(evaluations.back().step),
          options_.final_step > 0 ? "; the final step is " + std::to_string(options_.final_step)
                                  : std::string(),
          "): the chief stopped before its last checkpoint, or writes to another directory"));
    }
    std::this_thread::sleep_for(options_.poll_interval);
  }
}

}  // namespace dist
