#include "dist_train_run.h"

#include <cstring>
#include <new>
#include <string>

#include "dist/core/error.h"
#include "dist/train/elastic.h"
#include "evaluator_job.h"
#include "flag_names.h"
#include "run_training.h"
#include "startup_signals.h"

namespace dist::tools {
namespace {

constexpr const char* kOutOfMemory =
    "dist-train: out of memory: the model's training state (parameters, gradients, optimizer "
    "slots), a batch or the data set did not fit this process; with several workers, "
    "--sharding optimizer or gradients keeps 1/N of the optimizer's state (and of the "
    "gradients) on each, --sharding parameters 1/N of the parameters too; else try a smaller "
    "--global-batch or --batch-per-replica";

std::string first_line(const char* text) {
  const std::string all(text);
  return all.substr(0, all.find('\n'));
}

// Runs the job the options describe; the exit code.
int run(const TrainOptions& options, std::ostream& out) {
  // The evaluator task of a parameter-server job (every task runs this same command).
  if (is_evaluator_task(options)) {
    end_early_stop_watch("starting the evaluator task");
    auto result = run_evaluator(options, out);
    out << to_json_line(result) << std::endl;
    return 0;
  }
  auto result = run_training(options, out);
  if (result.chief) out << to_json_line(result) << std::endl;
  return result.interrupted ? 4 : 0;
}

}  // namespace

int run_dist_train(const TrainOptions& options, std::ostream& out, std::ostream& err) {
  try {
    return run(options, out);
  } catch (const InvalidArgument& e) {
    err << "dist-train: " << tool_message(e.what()) << std::endl;
    return 2;
  } catch (const StopRequested& e) {  // during the start-up: nothing was trained
    err << "dist-train: " << tool_message(e.what()) << std::endl;
    return 4;
  } catch (const ElasticJobStopped& e) {
    err << "dist-train: " << tool_message(e.what()) << std::endl;
    return 5;
  } catch (const CollectiveError& e) {
    err << "dist-train: " << tool_message(e.what()) << std::endl;
    return 1;
  } catch (const DataError& e) {
    err << "dist-train: " << tool_message(e.what()) << std::endl;
    return 3;
  } catch (const std::bad_alloc&) {
    err << kOutOfMemory << std::endl;
    return 1;
  } catch (const std::exception& e) {
    // LibTorch's CPU allocator reports a failed allocation as a c10::Error.
    if (std::strstr(e.what(), "DefaultCPUAllocator") != nullptr)
      err << kOutOfMemory << " (" << first_line(e.what()) << ")" << std::endl;
    else
      err << "dist-train: " << tool_message(e.what()) << std::endl;
    return 1;
  }
}

}  // namespace dist::tools
