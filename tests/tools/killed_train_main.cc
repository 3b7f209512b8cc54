// killed_train (test only): dist-train, except that the process kills itself with SIGKILL once
// its training completes step N, as a lost machine or kill -9 would. The elastic tests
// (dist_train_elastic_test.cc) start one worker of a job with it.
//
//   killed_train --kill-at-step N [any dist-train flags]
//
// Exits as dist-train does if the job ends before step N.
#include <signal.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "dist/core/error.h"
#include "train_job.h"
#include "train_options.h"

int main(int argc, char** argv) {
  std::vector<char*> rest{argv[0]};
  int64_t kill_at = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--kill-at-step" && i + 1 < argc)
      kill_at = std::atoll(argv[++i]);
    else
      rest.push_back(argv[i]);
  }
  if (kill_at < 1) {
    std::cerr << "killed_train: --kill-at-step N (N >= 1) is required" << std::endl;
    return 2;
  }
  dist::tools::CommandLine line =
      dist::tools::parse_command_line(static_cast<int>(rest.size()), rest.data());
  if (line.exit_code) return *line.exit_code;
  line.options.after_step = [kill_at](int64_t step) {
    if (step == kill_at) ::raise(SIGKILL);
  };
  try {
    auto result = dist::tools::run_training(line.options, std::cout);
    if (result.chief) std::cout << dist::tools::to_json_line(result) << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "killed_train: " << e.what() << std::endl;
    return 1;
  }
}
