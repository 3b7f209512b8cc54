// dist-train runs that several tool tests compare: one SGD job, its one-device weights, and the
// check that a multi-worker run of it reproduced them (cluster_launch_test, netns_cluster_test).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "multi_worker/process_group.h"
#include "test_util.h"

namespace dist::testing {

// dist-train's flags for `max_steps` SGD steps of global batch 64 on 1280 examples, seed 5,
// evaluated on 1000 test images, saving the weights to `weights`: the same for one device and
// for any workers x replicas. (The whole test set after every epoch of 20 steps took most of
// these runs' time; the test set never touches the weights.)
std::vector<std::string> job_args(const std::string& strategy, const std::string& weights,
                                  int max_steps = 20);

// `args` with `flag` given `value`: replaced where `args` gives it, else appended (dist-train
// refuses a flag given twice).
std::vector<std::string> with_flag(std::vector<std::string> args, const std::string& flag,
                                   const std::string& value);

// The last line of `output` that starts with `prefix` and then '{' (dist-train's JSON result;
// under dist-launch the chief's lines start with "[worker:0] "), parsed; null if there is none.
nlohmann::json last_json(const std::string& output, const std::string& prefix = "");

// Where dist-train's weights are after a run of `args`, whose last flag is --save-weights with
// any path (replaced here): the reference a multi-worker run is compared with. Trained once per
// test process for each distinct `args` and kept until the process ends: a run is seeded, so
// the next case that compares with it would train the same weights again (a reference costs a
// process and all its cores for 1 to 2 s; ElasticJobTest alone compared with 6 runs it had
// already made). One run at a time.
std::string reference_weights(std::vector<std::string> args);

// job_args (`max_steps` steps) on one device: reference_weights's file.
std::string one_device_weights(int max_steps = 20);

// A launcher's run of job_args with `workers` workers and `devices` replicas in all found its
// cluster through `source` ("TF_CONFIG", "Slurm") and ended with the weights of `expected`
// within `tolerance` (gtest expectations; the difference is printed).
void expect_workers_reached(const ProcessResult& result, const std::string& source, int workers,
                            int devices, const std::string& weights, const std::string& expected,
                            double tolerance = 1e-5);

// dist-launch's arguments for `workers` dist-train workers of one replica on 127.0.0.1, 640
// examples in global batches of 64 (10 steps an epoch), seed 5, 1000 test images unless `more`
// says otherwise, then `more` (the compression and sharding tests).
std::vector<std::string> small_multi_worker_job(int workers, std::vector<std::string> more);
// Runs dist-launch with `args` (5 minutes at most), or dist-train alone (1 minute).
ProcessResult launch_job(const std::vector<std::string>& args);
ProcessResult run_dist_train_alone(const std::vector<std::string>& args);
// dist-train's checks in this process: what dist-train does with `args` up to its first step
// (parse_command_line and run_dist_train, main's own code: tools/dist_train_run.h), which is not
// taken. The exit code and the output (stdout's lines, then stderr's) as run_dist_train_alone
// gives them; once every check has passed, kChecksPassed and an output that says so. A refusal
// table runs its rows here and one row of each kind of refusal as dist-train, which shows that
// main exits so; a row that needs a process of its own (a signal, a second job, a cluster's
// environment, a real open of a device) stays a process.
constexpr int kChecksPassed = -2;
ProcessResult dist_train_checks(const std::vector<std::string>& args);
// Each of `jobs`, in order: the rows `as_process` marks as dist-train processes (started
// together, 2 minutes at most), the others through dist_train_checks.
std::vector<ProcessResult> processes_and_checks(const std::vector<std::vector<std::string>>& jobs,
                                                const std::vector<bool>& as_process);
// The chief's "Bytes sent per step per worker: N" (-1 and a failed expectation without one).
int64_t bytes_sent_per_step(const ProcessResult& result);

}  // namespace dist::testing
