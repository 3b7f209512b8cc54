// Parameter-server jobs (--ps M, M > 0): one chief, --workers N workers, M ps tasks and, with
// --evaluator, one evaluator, all running the same command with TF_CONFIG naming their task
// (dist::LocalJob); output lines are prefixed [chief], [worker:1], [ps:0], [evaluator], and the
// launcher prints each task's pid as it starts it and each task's exit. The chief is the
// coordinator and the loss of a worker is its to handle: a worker or the evaluator that fails
// does not stop the job, nor does a ps task (the chief then fails by itself, naming it). The job
// ends with the chief: the other tasks get --grace-seconds to exit by themselves (the chief's
// shutdown tells them to), then SIGTERM, then SIGKILL after --grace-seconds more; the exit code
// is the chief's. After a chief that succeeded the evaluator gets --evaluator-seconds instead, to
// evaluate the last checkpoint (it exits by itself after that one). With --restart-workers, a
// worker that fails while the chief runs is started again with the same TF_CONFIG, at most
// kMaxWorkerRestarts times per worker. --max-restarts counts failures of the chief: each starts the
// whole job again. On a signal every task gets it.
#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "dist/distribute/local_cluster.h"
#include "job_setup.h"
#include "launches.h"
#include "task.h"

namespace dist::launch {
namespace {

// "chief" and "evaluator" are one of a kind; the others are numbered: ps:0, worker:1.
std::string task_name(const std::string& type, int index) {
  return type == "chief" || type == "evaluator" ? type : type + ":" + std::to_string(index);
}

Task start_ps_task(const JobSetup& setup, const std::string& name, const std::string& type,
                   const std::string& config) {
  Task task = start(local_launch(setup, config), name, type, config);
  std::cout << "[dist-launch] started " << name << " (pid " << task.pid << ")" << std::endl;
  return task;
}

// Starts a parameter-server job's tasks in the order a user's launcher would: the ps tasks, the
// workers, the evaluator, the chief last. Returns the chief's place in `tasks`.
size_t start_ps_job(const JobSetup& setup, std::vector<Task>& tasks) {
  std::map<std::string, int> counts = {{"chief", 1}, {"worker", setup.workers}, {"ps", setup.ps}};
  if (setup.evaluator) counts["evaluator"] = 1;
  const LocalJob cluster(counts);
  for (const std::string type : {"ps", "worker", "evaluator", "chief"}) {
    const auto count = counts.find(type);
    for (int i = 0; count != counts.end() && i < count->second; ++i)
      tasks.push_back(start_ps_task(setup, task_name(type, i), type, cluster.tf_config(type, i)));
  }
  return tasks.size() - 1;
}

// Whether --restart-workers starts `task`, which just exited, again.
bool restart_it(const JobSetup& setup, const Task& task, bool chief_running) {
  return setup.restart_workers && chief_running && task.type == "worker" && task.exit_code != 0;
}

// Reports the tasks other than the chief that have just exited, and starts workers again as
// --restart-workers says while `chief_running`.
void handle_exits(const JobSetup& setup, std::vector<Task>& tasks, size_t chief,
                  bool chief_running) {
  const size_t before = tasks.size();  // restarted ones are appended
  for (size_t i = 0; i < before; ++i) {
    if (i == chief || !reap(tasks[i])) continue;
    std::cout << "[dist-launch] " << tasks[i].name << " exited with " << tasks[i].ending;
    if (!restart_it(setup, tasks[i], chief_running)) {
      std::cout << std::endl;
      continue;
    }
    if (tasks[i].restarts >= kMaxWorkerRestarts) {
      std::cout << "; not starting it again: it was started again " << kMaxWorkerRestarts
                << " times already (the chief goes on without it)" << std::endl;
      continue;
    }
    const int restarts = tasks[i].restarts + 1;
    std::cout << "; starting it again (restart " << restarts << " of at most " << kMaxWorkerRestarts
              << ")" << std::endl;
    try {
      Task again = start_ps_task(setup, tasks[i].name, tasks[i].type, tasks[i].config);
      again.restarts = restarts;
      tasks.push_back(std::move(again));
    } catch (const std::exception& e) {
      std::cerr << "dist-launch: cannot start " << tasks[i].name << " again: " << e.what()
                << std::endl;
    }
  }
}

// A signal to the launcher goes to every task once: a second SIGTERM would cut short
// dist-train's checkpoint on the first (a task past its time since the chief exited has had
// SIGTERM already). Each gets `grace` before SIGKILL.
void forward_signal_once(std::vector<Task>& tasks, std::chrono::seconds grace) {
  std::cout << "[dist-launch] " << strsignal(forwarded_signal) << ": stopping every task"
            << std::endl;
  const int signal = forwarded_signal == SIGHUP ? SIGTERM : int(forwarded_signal);
  for (auto& t : tasks) {
    if (t.exited) continue;
    if (!t.signalled) kill(-t.pid, signal);
    t.signalled = true;
    t.kill_at = std::min(t.kill_at, Clock::now() + grace);
  }
}

// The chief has exited: the other tasks get --grace-seconds to exit by themselves, the
// evaluator (after a successful chief) --evaluator-seconds to evaluate the last checkpoint.
void give_tasks_their_time(const JobSetup& setup, std::vector<Task>& tasks, const Task& chief,
                           bool signalled) {
  std::cout << "[dist-launch] chief exited with " << chief.ending;
  if (!signalled && count_running(tasks) > 0) {
    const auto grace = std::chrono::seconds(setup.grace_seconds);
    std::cout << "; the other tasks have " << setup.grace_seconds
              << " s (--grace-seconds) to exit by themselves";
    const bool evaluating = chief.exit_code == 0;
    for (auto& t : tasks) {
      if (t.exited) continue;
      const bool evaluator = evaluating && t.type == "evaluator";
      if (evaluator)
        std::cout << ", the evaluator " << setup.evaluator_seconds
                  << " s (--evaluator-seconds) to evaluate the last checkpoint";
      t.terminate_at =
          Clock::now() + (evaluator ? std::chrono::seconds(setup.evaluator_seconds) : grace);
      t.kill_at = t.terminate_at + grace;
    }
  }
  std::cout << std::endl;
}

// SIGTERM to the tasks past their time, SIGKILL to those past it again.
void enforce_deadlines(std::vector<Task>& tasks) {
  std::string terminated;
  for (auto& t : tasks) {
    if (t.exited) continue;
    if (!t.signalled && Clock::now() >= t.terminate_at) {
      t.signalled = true;
      kill(-t.pid, SIGTERM);
      terminated += " " + t.name;
    } else if (Clock::now() >= t.kill_at) {
      kill(-t.pid, SIGKILL);
    }
  }
  if (!terminated.empty())
    std::cout << "[dist-launch] still running after its time since the chief exited:" << terminated
              << "; sending SIGTERM" << std::endl;
}

}  // namespace

JobResult run_ps_job(const JobSetup& setup) {
  std::vector<Task> tasks;
  size_t chief = 0;
  try {
    chief = start_ps_job(setup, tasks);
  } catch (const std::exception& e) {
    std::cerr << "dist-launch: " << e.what() << std::endl;
    signal_all(tasks, SIGKILL);
    return {1, false};
  }

  // After the chief (or a signal): first waiting for the tasks to exit by themselves, then
  // for SIGTERM to end them, then SIGKILL; each task on its own clock, as the evaluator gets
  // longer than the others.
  const auto grace = std::chrono::seconds(setup.grace_seconds);
  bool signalled = false;
  while (count_running(tasks) > 0) {
    if (forwarded_signal != 0 && !signalled) {
      signalled = true;
      forward_signal_once(tasks, grace);
    }
    pump_output(tasks);
    // The chief first: a worker that ends as the chief does is not started again.
    if (reap(tasks[chief])) give_tasks_their_time(setup, tasks, tasks[chief], signalled);
    // Workers are started again only while the chief runs and nothing is stopping the job.
    handle_exits(setup, tasks, chief, !signalled && !tasks[chief].exited);
    enforce_deadlines(tasks);
  }
  drain_output(tasks);
  const int result = tasks[chief].exit_code;
  if (result != 0) std::cerr << "dist-launch: chief failed with exit code " << result << std::endl;
  // The job succeeded, but its evaluation did not: say so last, where it is seen.
  for (const auto& t : tasks)
    if (result == 0 && !signalled && t.type == "evaluator" && t.exit_code != 0)
      std::cerr << "dist-launch: warning: the evaluator exited with " << t.ending
                << " before it had evaluated the last checkpoint (its output above says why)"
                << std::endl;
  return {result, signalled};
}

}  // namespace dist::launch
