#include "elastic_job.h"

#include "dist/distribute/cluster_resolver.h"

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
  elastic.program = "dist-train";
  elastic.min_workers_name = "--min-workers";
  elastic.resume_hint = "start the job again with --checkpoint-dir to resume from a checkpoint";
  elastic.on_loss = options.on_loss;
  return elastic;
}

}  // namespace

TrainResult run_elastic_training(const TrainOptions& options, std::ostream& chief_out,
                                 const GenerationTraining& train) {
  ElasticJob job(elastic_options(options));
  TrainResult result;
  const ElasticResult elastic = job.run([&](ElasticGeneration& generation) {
    JobSetup setup = start_job(options, chief_out, &generation);
    result = train(setup, generation);
    return GenerationEnd{result.steps, result.interrupted};
  });
  if (!elastic.took_part) {
    TrainResult nothing;
    nothing.chief = false;  // no result line: the job's chief printed it
    return nothing;
  }
  result.worker_sizes = elastic.worker_sizes;
  return result;
}

}  // namespace dist::tools
