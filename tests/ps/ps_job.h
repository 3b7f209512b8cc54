// A ParameterServerStrategy job of real processes on 127.0.0.1 (ps_task_main.cc as every
// task), for tests/ps/ps_job_test.cc and ps_job_checkpoint_test.cc, and the weights it writes.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "dist/distribute/local_cluster.h"
#include "multi_worker/process_group.h"

namespace dist::ps_jobs {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// A job of one chief, `workers` workers and `ps` ps tasks running `args`; process order:
// the ps tasks, then the workers, then the chief (last, as a user's launcher would).
struct Job {
  Job(int workers, int ps, const std::vector<std::string>& args, std::vector<std::string> env = {});
  void start(const std::string& type, int index, const std::vector<std::string>& args,
             std::vector<std::string> env);
  size_t ps_process(int i) const { return static_cast<size_t>(i); }
  size_t worker_process(int i) const { return static_cast<size_t>(ps + i); }
  size_t chief_process() const { return static_cast<size_t>(ps + workers); }
  // Each task's output under a line "--- ps:0 (exit 0)", for a failed expectation.
  std::string describe(const std::vector<testing::ProcessResult>& results) const;

  // A job of 0 steps: every task exits 0, a worker that starts serving only after the chief is
  // done included (the chief's shutdown call waits a while for a worker never heard from).
  void expect_zero_step_job_ended(const std::vector<testing::ProcessResult>& results) const;

  // After wait_all: what `ps` shows of the job (its tasks and anything they started) is
  // nothing. Whatever is left is killed, so no process outlives the test.
  void expect_no_process_left() const;

  LocalJob cluster;
  int workers, ps;
  std::string token;  // DIST_JOB_TOKEN in every task's environment
  testing::WorkerProcesses processes;
};

// The tensors of a safetensors file, in its order.
NamedTensors load(const std::string& path);
// The largest relative difference between tensors of the same names in the same order (a
// failure otherwise).
double relative_difference(const NamedTensors& a, const NamedTensors& b);

}  // namespace dist::ps_jobs
