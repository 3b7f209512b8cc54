// dist-train: trains the tutorial CNN (or the MLP) on Fashion-MNIST under a strategy. On the
// evaluator task of a parameter-server job it evaluates the chief's checkpoints instead
// (evaluator_job.h).
//
// Exit codes: 0 success; 1 a failure while training (for example a lost peer);
// 2 bad command line or option values; 3 missing or corrupt data files or checkpoints (on the
// evaluator task also: no new checkpoint for --evaluator-timeout seconds); 4 stopped by SIGTERM
// or SIGINT after finishing the current step (with --checkpoint-dir a checkpoint was saved
// first: rerun the same command to resume), or within about a second when it came during the
// start-up (nothing trained yet); 5 an elastic job ended below --min-workers (or
// there was none left to join).
// The last line of stdout is one JSON object with the results.
#include <pthread.h>

#include <csignal>
#include <cstring>
#include <iostream>
#include <new>
#include <string>

#include "dist/core/error.h"
#include "dist/train/elastic.h"
#include "evaluator_job.h"
#include "flag_names.h"
#include "run_training.h"
#include "startup_signals.h"
#include "train_options.h"

namespace {

// A SIGTERM or SIGINT that came before main: LibTorch's static initialization alone takes about
// half a second (docs/dist-train.md), during which the default action would end the process
// with 143 instead of 4.
volatile std::sig_atomic_t signal_before_main = 0;

void record_signal_before_main(int signal_number) { signal_before_main = signal_number; }

// What SIGTERM and SIGINT did before the preinit function (SIG_DFL, or SIG_IGN as a shell leaves
// them for a background job): main puts it back under the library's watcher, which restores it
// when the job's own watchers are done.
struct sigaction inherited_sigterm = {};
struct sigaction inherited_sigint = {};

// Runs from the executable's preinit array: after the dynamic loader has mapped the libraries,
// before any of them initializes. Only a flag is set (async-signal-safe, and nothing of the
// libraries is usable yet); main hands it to the library's watcher.
void watch_signals_before_main() {
  struct sigaction action {};
  action.sa_handler = record_signal_before_main;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // the libraries' start-up never sees EINTR from it
  sigaction(SIGTERM, &action, &inherited_sigterm);
  sigaction(SIGINT, &action, &inherited_sigint);
}

__attribute__((section(".preinit_array"),
               used)) void (*const kWatchSignalsBeforeMain)() = watch_signals_before_main;

// main's first step: the library's watcher replaces the flag, a signal that came is passed on
// to it, and the inherited action is what the watcher restores when the job's own watchers are
// done (startup_signals.h). The signals are blocked meanwhile, so none falls between.
void watch_signals_from_main() {
  sigset_t stops, before;
  sigemptyset(&stops);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stops, &before);
  sigaction(SIGTERM, &inherited_sigterm, nullptr);
  sigaction(SIGINT, &inherited_sigint, nullptr);
  dist::tools::watch_stop_signals_from_start();
  // Pending until the unblocking; one the process inherited as ignored stays ignored.
  const struct sigaction& inherited =
      signal_before_main == SIGINT ? inherited_sigint : inherited_sigterm;
  if (signal_before_main != 0 && inherited.sa_handler != SIG_IGN) raise(signal_before_main);
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

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
int run(const dist::tools::TrainOptions& options) {
  // The evaluator task of a parameter-server job (every task runs this same command).
  if (dist::tools::is_evaluator_task(options)) {
    dist::tools::end_early_stop_watch("starting the evaluator task");
    auto result = dist::tools::run_evaluator(options, std::cout);
    std::cout << dist::tools::to_json_line(result) << std::endl;
    return 0;
  }
  auto result = dist::tools::run_training(options, std::cout);
  if (result.chief) std::cout << dist::tools::to_json_line(result) << std::endl;
  return result.interrupted ? 4 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  // First: a SIGTERM from the preinit array on exits 4 (startup_signals.h), never 143.
  watch_signals_from_main();
  const dist::tools::CommandLine line = dist::tools::parse_command_line(argc, argv);
  if (line.exit_code) return *line.exit_code;
  try {
    return run(line.options);
  } catch (const dist::InvalidArgument& e) {
    std::cerr << "dist-train: " << dist::tools::tool_message(e.what()) << std::endl;
    return 2;
  } catch (const dist::StopRequested& e) {  // during the start-up: nothing was trained
    std::cerr << "dist-train: " << dist::tools::tool_message(e.what()) << std::endl;
    return 4;
  } catch (const dist::ElasticJobStopped& e) {
    std::cerr << "dist-train: " << dist::tools::tool_message(e.what()) << std::endl;
    return 5;
  } catch (const dist::CollectiveError& e) {
    std::cerr << "dist-train: " << dist::tools::tool_message(e.what()) << std::endl;
    return 1;
  } catch (const dist::DataError& e) {
    std::cerr << "dist-train: " << dist::tools::tool_message(e.what()) << std::endl;
    return 3;
  } catch (const std::bad_alloc&) {
    std::cerr << kOutOfMemory << std::endl;
    return 1;
  } catch (const std::exception& e) {
    // LibTorch's CPU allocator reports a failed allocation as a c10::Error.
    if (std::strstr(e.what(), "DefaultCPUAllocator") != nullptr)
      std::cerr << kOutOfMemory << " (" << first_line(e.what()) << ")" << std::endl;
    else
      std::cerr << "dist-train: " << dist::tools::tool_message(e.what()) << std::endl;
    return 1;
  }
}
