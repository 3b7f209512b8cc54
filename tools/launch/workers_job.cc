// A multi-worker job: one process per worker with TF_CONFIG naming its task (and
// DIST_REPLICAS_PER_WORKER), every line they print prefixed with the task name, all of them
// stopped as soon as one fails (SIGTERM, then SIGKILL after --grace-seconds).
//
// Exit code: 0 when every worker succeeded; the first failing worker's code; after a signal,
// 4 ("stopped, resumable": what dist-train returns when it stopped cleanly on a signal) if
// every worker exited with 0 or 4, else the first other code.
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "job_setup.h"
#include "launches.h"
#include "task.h"

namespace dist::launch {
namespace {

// An elastic job (--workers MIN:MAX): a worker that fails is started again with the same
// TF_CONFIG and joins the running job (at most kMaxWorkerRestarts times per worker), while the
// others go on without it; nothing is stopped. Once a worker has finished (exit 0) none is
// started again, and the ones still running get --grace-seconds to end by themselves (a joiner
// still waiting for admission) before SIGTERM. Exit code: 0 once a worker finished, else the
// last failure's (the job stopped below its minimum).
JobResult run_elastic_job(const JobSetup& setup, std::vector<Task>& workers,
                          const std::vector<Launch>& launches) {
  int result = 0;
  bool finished = false;
  auto stop_deadline = Clock::time_point::max();
  while (count_running(workers) > 0) {
    if (forwarded_signal != 0 && stop_deadline == Clock::time_point::max()) {
      signal_all(workers, forwarded_signal == SIGHUP ? SIGTERM : int(forwarded_signal));
      stop_deadline = Clock::now() + std::chrono::seconds(setup.grace_seconds);
    }
    pump_output(workers);
    const size_t before = workers.size();  // restarted ones are appended
    for (size_t i = 0; i < before; ++i) {
      Task& w = workers[i];
      if (!reap(w)) continue;
      std::cout << "[dist-launch] " << w.name << " exited with " << w.ending;
      finished = finished || w.exit_code == 0;
      if (w.exit_code != 0 && !finished) result = w.exit_code;
      const bool again = !finished && forwarded_signal == 0 && w.exit_code != 0 &&
                         worth_restarting(w.exit_code) && w.restarts < kMaxWorkerRestarts;
      if (finished && stop_deadline == Clock::time_point::max())
        stop_deadline = Clock::now() + std::chrono::seconds(setup.grace_seconds);
      if (!again) {
        std::cout << std::endl;
        continue;
      }
      std::cout << "; starting it again to join the running job (restart " << w.restarts + 1
                << " of at most " << kMaxWorkerRestarts << ")" << std::endl;
      const size_t index = static_cast<size_t>(std::stoi(w.name.substr(w.name.find(':') + 1)));
      Task replacement = start(launches.at(index), w.name, w.type, w.config);
      replacement.restarts = w.restarts + 1;
      workers.push_back(std::move(replacement));
    }
    if (Clock::now() > stop_deadline) {
      signal_all(workers, SIGTERM);
      if (Clock::now() > stop_deadline + std::chrono::seconds(setup.grace_seconds))
        signal_all(workers, SIGKILL);
    }
  }
  drain_output(workers);
  return {finished ? 0 : result, forwarded_signal != 0};
}

// A job of a fixed set of workers: all are stopped as soon as one fails, or on a signal (the
// exit code of the top comment).
JobResult run_fixed_job(const JobSetup& setup, std::vector<Task>& workers) {
  int result = 0;
  std::string failed;
  bool stopping = false;
  bool signalled = false;
  auto stop_deadline = Clock::time_point::max();
  while (count_running(workers) > 0) {
    if (forwarded_signal != 0 && !stopping) {
      stopping = signalled = true;
      std::cout << "[dist-launch] " << strsignal(forwarded_signal)
                << ": stopping the workers (they save a checkpoint if they have one)" << std::endl;
      signal_all(workers, forwarded_signal == SIGHUP ? SIGTERM : int(forwarded_signal));
      stop_deadline = Clock::now() + std::chrono::seconds(setup.grace_seconds);
    }
    pump_output(workers);
    for (auto& w : workers) {
      if (!reap(w)) continue;
      if (signalled) {
        // Stopped on request: 4 unless a worker failed at it (0 if all had finished anyway).
        if (w.exit_code == kStoppedResumable && result == 0) {
          result = kStoppedResumable;
        } else if (w.exit_code != 0 && w.exit_code != kStoppedResumable &&
                   (result == 0 || result == kStoppedResumable)) {
          result = w.exit_code;
          failed = w.name;
        }
      } else if (w.exit_code != 0 && !stopping) {
        stopping = true;
        result = w.exit_code;
        failed = w.name;
        std::cout << "[dist-launch] " << w.name << " exited with code " << w.exit_code
                  << "; stopping the other workers" << std::endl;
        signal_all(workers, SIGTERM);
        stop_deadline = Clock::now() + std::chrono::seconds(setup.grace_seconds);
      }
    }
    if (stopping && Clock::now() > stop_deadline) signal_all(workers, SIGKILL);
  }
  drain_output(workers);
  if (!failed.empty())
    std::cerr << "dist-launch: " << failed << " failed with exit code " << result << std::endl;
  return {result, signalled};
}

}  // namespace

JobResult run_workers_job(const JobSetup& setup) {
  std::vector<Task> workers;
  std::vector<Launch> launches;
  try {
    launches = worker_launches(setup);
    for (int i = 0; i < setup.workers; ++i)
      workers.push_back(
          start(launches[static_cast<size_t>(i)], "worker:" + std::to_string(i), "worker", ""));
  } catch (const std::exception& e) {
    std::cerr << "dist-launch: " << e.what() << std::endl;
    signal_all(workers, SIGKILL);
    return {1, false};
  }
  if (setup.min_workers > 0) return run_elastic_job(setup, workers, launches);
  return run_fixed_job(setup, workers);
}

}  // namespace dist::launch
