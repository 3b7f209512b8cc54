// A ParameterServerStrategy job of real processes (ps_job.h).
#include "ps/ps_job.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include "dist/train/safetensors.h"
#include "equivalence_data.h"
#include "test_util.h"

namespace dist::ps_jobs {

Job::Job(int workers, int ps, const std::vector<std::string>& args, std::vector<std::string> env)
    : cluster({{"chief", 1}, {"worker", workers}, {"ps", ps}}), workers(workers), ps(ps) {
  static int jobs = 0;
  token = "ps-job-test-" + std::to_string(getpid()) + "-" + std::to_string(jobs++);
  env.push_back("DIST_JOB_TOKEN=" + token);
  for (int i = 0; i < ps; ++i) start("ps", i, args, env);
  for (int i = 0; i < workers; ++i) start("worker", i, args, env);
  start("chief", 0, args, env);
}

void Job::start(const std::string& type, int index, const std::vector<std::string>& args,
                std::vector<std::string> env) {
  env.push_back("TF_CONFIG=" + cluster.tf_config(type, index));
  processes.start(DIST_TEST_PS_TASK_BINARY, args, env);
}

std::string Job::describe(const std::vector<testing::ProcessResult>& results) const {
  std::string out;
  for (size_t i = 0; i < results.size(); ++i) {
    const std::string name = i == chief_process() ? "chief"
                             : i < static_cast<size_t>(ps)
                                 ? "ps:" + std::to_string(i)
                                 : "worker:" + std::to_string(i - static_cast<size_t>(ps));
    out += "--- " + name + " (exit " + std::to_string(results[i].exit_code) + ")\n" +
           results[i].output;
  }
  return out;
}

void Job::expect_zero_step_job_ended(const std::vector<testing::ProcessResult>& results) const {
  for (const auto& result : results) EXPECT_EQ(result.exit_code, 0) << describe(results);
}

void Job::expect_no_process_left() const {
  const auto left = testing::processes_of_job(token);
  EXPECT_TRUE(left.empty()) << left.size() << " processes of the job still run, pid " << left[0];
  for (pid_t pid : left) ::kill(pid, SIGKILL);
}

NamedTensors load(const std::string& path) {
  auto file = load_safetensors(path);
  return NamedTensors(file.tensors.begin(), file.tensors.end());
}

double relative_difference(const NamedTensors& a, const NamedTensors& b) {
  EXPECT_EQ(a.size(), b.size());
  std::vector<torch::Tensor> x, y;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    x.push_back(a[i].second);
    y.push_back(b[i].second);
  }
  return testing::max_relative_difference(x, y);
}

}  // namespace dist::ps_jobs
