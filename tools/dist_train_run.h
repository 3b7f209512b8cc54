// dist-train's job from its checked options to its exit code: the job the options describe
// (training, or the evaluator task of a parameter-server job), its JSON result on `out`, and
// every error mapped to dist-train's exit code with its message on `err`. main is the signal
// watch that must start before it (dist_train.cc), parse_command_line, then this; the tests run
// the same two in their own process to see a refusal exactly as dist-train gives it, without
// starting a process (0.55 s of CPU for LibTorch's libraries) for each: dist_train_checks of
// tests/tools/train_runs.h, which stops at TrainOptions::before_first_step.
//
// The exit codes are listed at the top of dist_train.cc (and in docs/dist-train.md).
#pragma once

#include <ostream>

#include "train_options.h"

namespace dist::tools {

// Runs the job; its exit code. Throws nothing the job throws as a std::exception (each is an
// exit code and a line on `err`); anything else (a test's stop before the first step) passes.
int run_dist_train(const TrainOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dist::tools
