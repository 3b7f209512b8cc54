#include "elastic_job.h"

#include <string>
#include <utility>

#include "dist/core/error.h"
#include "dist/distribute/cluster_resolver.h"
#include "strategy_factory.h"

namespace dist::tools {
namespace {

// What a joining worker must share with the job: what decides its steps. The job's derived
// sizes come from these flags: an elastic job has --global-batch.
std::vector<std::pair<std::string, std::string>> elastic_settings(const TrainOptions& o) {
  auto settings = option_settings(o);
  settings.insert(settings.end(), {{"--global-batch", std::to_string(o.global_batch)},
                                   {"--train-examples", std::to_string(o.train_examples)},
                                   {"--test-examples", std::to_string(o.test_examples)},
                                   {"--min-workers", std::to_string(o.min_workers)},
                                   {"--commit-every", std::to_string(o.commit_every)}});
  return settings;
}

ElasticOptions elastic_options(const TrainOptions& options) {
  ElasticOptions elastic;
  elastic.min_workers = options.min_workers;
  elastic.commit_every = options.commit_every;
  elastic.cluster = resolve_cluster().config;
  elastic.rendezvous_timeout =
      whole_milliseconds("--rendezvous-timeout", options.rendezvous_timeout);
  // Every survivor has seen the loss within the collective timeout.
  elastic.agreement_timeout =
      whole_milliseconds("--collective-timeout", options.collective_timeout) +
      std::chrono::seconds(10);
  elastic.settings = elastic_settings(options);
  elastic.strategy = multi_worker_options(options);  // start_job makes it (make_strategy)
  return elastic;
}

// The library names ElasticOptions::min_workers; dist-train names its flag, and says how to
// resume (from --checkpoint-dir).
ElasticJobStopped in_flag_terms(const ElasticJobStopped& e) {
  const auto& below = e.below_minimum();
  if (!below && e.last_committed_step() < 0) return e;
  const std::string hint =
      " (start the job again with --checkpoint-dir to resume from a checkpoint)";
  if (!below) return ElasticJobStopped(std::string(e.what()) + hint, e.last_committed_step());
  return ElasticJobStopped(
      detail::concat("the elastic job stops: lost ", below->lost, "; ", below->remaining,
                     " worker(s) remain, fewer than --min-workers ", below->min_workers,
                     "; the last committed step is ", e.last_committed_step(), hint),
      e.last_committed_step(), below);
}

}  // namespace

TrainResult run_elastic_training(const TrainOptions& options, std::ostream& chief_out,
                                 const GenerationTraining& train) {
  TrainResult result;
  ElasticResult elastic;
  bool started = false;  // before it, an InvalidArgument is the library's about the options
  try {
    ElasticOptions job = elastic_options(options);
    elastic = run_elastic(std::move(job), [&](ElasticContext& context) {
      started = true;
      JobSetup setup = start_job(options, chief_out, &context);
      result = train(setup, context);
      context.set_end({result.steps, result.interrupted});
    });
  } catch (const InvalidArgument& e) {
    if (started) throw;
    throw InvalidArgument(std::string("--min-workers: ") + e.what());
  } catch (const ElasticJobStopped& e) {
    throw in_flag_terms(e);
  }
  if (!elastic.took_part) {
    TrainResult nothing;
    nothing.chief = false;  // no result line: the job's chief printed it
    return nothing;
  }
  result.worker_sizes = elastic.worker_sizes;
  return result;
}

}  // namespace dist::tools
