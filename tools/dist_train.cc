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
// The last line of stdout is one JSON object with the results. After the signal watch, main is
// parse_command_line and run_dist_train (dist_train_run.h), which the tests also run in-process.
#include <pthread.h>

#include <csignal>
#include <iostream>

#include "dist/core/blas_core.h"
#include "dist_train_run.h"
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

}  // namespace

int main(int argc, char** argv) {
  // First: a SIGTERM from the preinit array on exits 4 (startup_signals.h), never 143.
  watch_signals_from_main();
  // Before anything multiplies: OpenBLAS's kernels for this CPU (dist/core/blas_core.h).
  dist::choose_openblas_core();
  const dist::tools::CommandLine line = dist::tools::parse_command_line(argc, argv);
  if (line.exit_code) return *line.exit_code;
  return dist::tools::run_dist_train(line.options, std::cout, std::cerr);
}
