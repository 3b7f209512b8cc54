// dist-train: trains the tutorial CNN (or the MLP) on Fashion-MNIST under a strategy. On the
// evaluator task of a parameter-server job it evaluates the chief's checkpoints instead
// (evaluator_job.h).
//
// Exit codes: 0 success; 1 a failure while training (for example a lost peer);
// 2 bad command line or option values; 3 missing or corrupt data files or checkpoints (on the
// evaluator task also: no new checkpoint for --evaluator-timeout seconds); 4 stopped by SIGTERM
// or SIGINT after finishing the current step (with --checkpoint-dir a checkpoint was saved
// first: rerun the same command to resume).
// The last line of stdout is one JSON object with the results.
#include <iostream>
#include <new>

#include <CLI/CLI.hpp>

#include "dist/core/error.h"
#include "evaluator_job.h"
#include "train_job.h"

namespace {

// -1 ("no limit", "all") or at least 1: 0 is neither, and used to mean "the default" silently.
const CLI::Validator kMinusOneOrPositive(
    [](std::string& text) -> std::string {
      try {
        const long long value = std::stoll(text);
        if (value == -1 || value >= 1) return {};
      } catch (const std::exception&) {
      }
      return "must be -1 or at least 1, got " + text;
    },
    "-1 or >= 1");

}  // namespace

int main(int argc, char** argv) {
  dist::tools::TrainOptions o;
  CLI::App app{"dist-train: train on Fashion-MNIST with a tf.distribute-style strategy"};
  app.add_option("--loop", o.loop,
                 "custom (the tf.distribute custom training loop) | fit (Keras-style "
                 "Model::fit with callbacks)")
      ->capture_default_str();
  app.add_option("--strategy", o.strategy,
                 "default | one_device | mirrored | central_storage | multi_worker (TF_CONFIG, "
                 "srun or mpirun) | parameter_server (TF_CONFIG with chief, worker and ps "
                 "tasks, e.g. from dist-launch --ps: every task runs this same command; "
                 "asynchronous, one replica per worker)")
      ->capture_default_str();
  app.add_option("--replicas", o.replicas,
                 "replicas (mirrored/central_storage; default: one per core)")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "intra-op threads per replica (default: cores / replicas)")
      ->check(CLI::PositiveNumber);
  app.add_option("--collective-timeout", o.collective_timeout,
                 "multi_worker: seconds before a lost or stalled worker is reported; "
                 "parameter_server: the deadline of every call to another task, and how long "
                 "ps and worker tasks wait to hear from the chief before giving up")
      ->capture_default_str();
  app.add_option("--rendezvous-timeout", o.rendezvous_timeout,
                 "multi_worker: seconds for all workers to join; parameter_server: for the ps "
                 "tasks to serve")
      ->capture_default_str();
  app.add_option("--evaluator-timeout", o.evaluator_timeout,
                 "parameter_server, on the evaluator task: seconds without a new checkpoint in "
                 "--checkpoint-dir before it gives up (exit 3)")
      ->capture_default_str();
  app.add_option("--cross-device-ops", o.cross_device_ops,
                 "parallel | reduction_to_one_device | hierarchical_copy");
  app.add_option("--epochs", o.epochs, "epochs to train")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-steps", o.max_steps, "stop after this many global steps (-1: no limit)")
      ->capture_default_str()
      ->check(kMinusOneOrPositive);
  app.add_option("--steps-per-epoch", o.steps_per_epoch,
                 "parameter_server only: steps the chief schedules per epoch, shared by all "
                 "workers (-1: one pass of the training data in all, ceil(examples / global "
                 "batch), so an epoch means what it means under the other strategies; each "
                 "worker iterates its own copy of the data, started i/N of the way into the "
                 "pass and repeated, so it never runs dry)")
      ->capture_default_str()
      ->check(kMinusOneOrPositive);
  app.add_option("--batch-per-replica", o.batch_per_replica,
                 "examples per replica per step (parameter_server: per worker step)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--global-batch", o.global_batch,
                 "examples per step across all replicas (overrides --batch-per-replica)")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "learning rate")->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "adam | sgd")->capture_default_str();
  app.add_option("--model", o.model, "cnn (tutorial CNN) | mlp (784-4096-4096-10)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of weights and shuffling")->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--train-examples", o.train_examples,
                 "train on the first N examples only (-1: all)")
      ->capture_default_str()
      ->check(kMinusOneOrPositive);
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "save resumable checkpoints here (each epoch end, every --checkpoint-every "
                 "steps, at --max-steps and on SIGTERM/SIGINT); resume from the latest one");
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "also save every K global steps (0: only at epoch ends and stops)")
      ->capture_default_str();
  app.add_option("--resume-from", o.resume_from,
                 "resume from this checkpoint file instead of the latest in --checkpoint-dir "
                 "(--loop custom)");
  app.add_option("--max-to-keep", o.max_to_keep, "checkpoints to keep")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--log-dir", o.log_dir,
                 "per-epoch metrics as TensorBoard event files in LOG_DIR/train and "
                 "LOG_DIR/validation, and appended to LOG_DIR/metrics.jsonl (--loop fit: "
                 "LOG_DIR/metrics.csv)");
  app.add_option("--save-weights", o.save_weights, "write the final weights as safetensors");
  bool no_progress = false;
  app.add_option("--mixed-precision", o.mixed_precision,
                 "float32 | bf16 (compute in bfloat16, variables float32; Keras' "
                 "mixed_bfloat16) | fp16 (GPU only)")
      ->capture_default_str();
  app.add_flag("--no-progress", no_progress, "only print per-epoch lines");
  bool unchecked = false;
  app.add_flag("--unchecked-collectives", unchecked,
               "multi_worker: skip the agreement before each collective (for measuring its "
               "cost; workers that diverge then abort inside Gloo)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  o.progress = !no_progress;
  o.check_collectives = !unchecked;

  try {
    // The evaluator task of a parameter-server job (every task runs this same command).
    if (dist::tools::is_evaluator_task(o)) {
      auto result = dist::tools::run_evaluator(o, std::cout);
      std::cout << dist::tools::to_json_line(result) << std::endl;
      return 0;
    }
    auto result = dist::tools::run_training(o, std::cout);
    if (result.chief) std::cout << dist::tools::to_json_line(result) << std::endl;
    return result.interrupted ? 4 : 0;
  } catch (const dist::InvalidArgument& e) {
    std::cerr << "dist-train: " << e.what() << std::endl;
    return 2;
  } catch (const dist::CollectiveError& e) {
    std::cerr << "dist-train: " << e.what() << std::endl;
    return 1;
  } catch (const dist::DataError& e) {
    std::cerr << "dist-train: " << e.what() << std::endl;
    return 3;
  } catch (const std::bad_alloc&) {
    std::cerr << "dist-train: out of memory (a batch, the model or the data set did not fit); "
                 "try a smaller --global-batch or --batch-per-replica"
              << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "dist-train: " << e.what() << std::endl;
    return 1;
  }
}
