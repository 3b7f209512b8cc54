// Elastic dist-train jobs (--min-workers, docs/elastic.md) with real worker processes on
// 127.0.0.1: a worker killed with SIGKILL mid-run, a worker started later that joins, a second
// loss during the resize, a job left below its minimum, a joiner with other settings. The
// weights at the end must equal those of one device on the same global batches, as for a job
// that never changed size. Faults come from killed_train (tests/tools/killed_train_main.cc).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "collective/etcd_cluster.h"
#include "dist/distribute/local_cluster.h"
#include "equivalence_data.h"
#include "multi_worker/process_group.h"
#include "test_util.h"
#include "tools/elastic_jobs.h"
#include "tools/train_runs.h"
#include "tools/weight_files.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::difference_from_one_device;
using testing::elastic_args;
using testing::ProcessResult;
using testing::start_workers;
using testing::TempDir;
using testing::with;
using testing::WorkerProcesses;

// Every process of the job ended and the store's host left its port.
void expect_nothing_left(WorkerProcesses& processes, const std::vector<int>& ports) {
  for (size_t i = 0; i < processes.size(); ++i)
    EXPECT_TRUE(testing::gone(processes.pid(i))) << "process " << i << " still runs";
  EXPECT_TRUE(testing::wait_until_store_host_gone(ports[0], 20s));
}

// A job of 3 workers and `steps` steps: worker:1 SIGKILLs itself after step `kill_at`, a new
// worker:1 joins (worker:0 holds after step `hold_at` until it asked, so that it joins mid-run).
struct LossAndJoin {
  std::string optimizer = "sgd";
  int steps = 150, kill_at = 50, hold_at = 100;
  double tolerance = 1e-5;        // of the final weights from one device's
  std::vector<std::string> more;  // flags: --loop fit, --checkpoint-dir of an earlier run
  int resumed_at = -1;            // the checkpoint step the job resumes from; -1 for none
};

void expect_loss_and_join_end_at_one_device(const LossAndJoin& job) {
  TempDir dir;
  const auto ports = free_loopback_ports(3);
  const std::string weights = dir.file("elastic.safetensors");
  const std::string go_on = dir.file("joiner-asked");
  const auto args = with(elastic_args(weights, job.steps, 2, job.optimizer), job.more);
  WorkerProcesses processes;
  start_workers(processes, ports, args,
                {{"--hold-at-step", std::to_string(job.hold_at), "--until-file", go_on},
                 {"--kill-at-step", std::to_string(job.kill_at)}});
  ASSERT_TRUE(processes.wait_for_output(0, "sizes 3 -> 2 (lost worker:1)", 120s));
  processes.start(DIST_TRAIN_BINARY, args, {"TF_CONFIG=" + local_tf_config(ports, 1)});
  ASSERT_TRUE(processes.wait_for_output(3, "asked to join", 60s));
  testing::write_file(go_on, "");
  const auto results = processes.wait_all(240s);
  EXPECT_EQ(results[1].exit_code, 128 + 9);  // SIGKILL
  for (size_t i : {0, 2, 3}) ASSERT_EQ(results[i].exit_code, 0) << results[i].output;
  const std::string& chief = results[0].output;
  EXPECT_TRUE(testing::contains(chief, "sizes 2 -> 3 (joined worker:1)")) << chief;
  EXPECT_TRUE(testing::contains(chief, "s after this worker saw the loss")) << chief;
  EXPECT_EQ(testing::last_json(chief)["worker_sizes"], nlohmann::json({3, 2, 3})) << chief;
  EXPECT_EQ(testing::last_json(chief)["steps"], job.steps);
  EXPECT_EQ(testing::last_json(chief)["resumed_at_step"], job.resumed_at);
  const double diff = difference_from_one_device(weights, job.steps, job.optimizer);
  std::string flags;
  for (const auto& flag : job.more) flags += " " + flag;
  std::printf("3 -> 2 -> 3 workers, %s, %d steps%s: max relative difference from one device %.3g\n",
              job.optimizer.c_str(), job.steps, flags.c_str(), diff);
  EXPECT_LT(diff, job.tolerance);
  expect_nothing_left(processes, ports);
}

TEST(ElasticJobTest, LosesAWorkerAndTakesANewOneAndEndsAtTheWeightsOfOneDevice) {
  expect_loss_and_join_end_at_one_device({});
}

// fit (--loop fit) goes through the same generations: keras::callbacks::Elastic commits and
// restores as BackupAndRestore does. Its steps are the custom loop's bit for bit, so one device's
// custom loop is the reference.
TEST(ElasticJobTest, FitLosesAWorkerAndTakesANewOneAndEndsAtTheWeightsOfOneDevice) {
  LossAndJoin fit;
  // Commits every 7 steps: the loss at step 50 goes back to step 49, and the join waits for
  // step 105.
  fit.more = {"--loop", "fit", "--commit-every", "7"};
  expect_loss_and_join_end_at_one_device(fit);
}

// worker:1 dies after the last step of fit's first epoch, as the others validate it: they go on
// from the commit of that step, which ends the epoch (its validation is taken again), not from
// the next epoch's start.
TEST(ElasticJobTest, FitLosesAWorkerDuringAnEpochsValidationAndValidatesItAgain) {
  TempDir dir;
  const auto ports = free_loopback_ports(2);
  const std::string weights = dir.file("elastic.safetensors");
  WorkerProcesses processes;
  start_workers(processes, ports, with(elastic_args(weights, 40, 1), {"--loop", "fit"}),
                {{}, {"--kill-at-step", "20"}});
  const auto results = processes.wait_all(240s);
  const std::string& out = results[0].output;
  ASSERT_EQ(results[0].exit_code, 0) << out;
  EXPECT_TRUE(testing::contains(out, "at step 20 (epoch 1, batch 20)")) << out;
  EXPECT_TRUE(testing::contains(out, "sizes 2 -> 1 (lost worker:1); step 21 done")) << out;
  EXPECT_EQ(testing::last_json(out)["epochs"], 2) << out;
  EXPECT_EQ(testing::last_json(out)["steps"], 40) << out;
  // Epoch 1's line (which carries its validation) comes from the generation after the loss.
  size_t epoch_lines = 0;
  for (size_t at = out.find("val_loss"); at != std::string::npos; at = out.find("val_loss", at + 1))
    ++epoch_lines;
  EXPECT_EQ(epoch_lines, 2u) << out;
  const double diff = difference_from_one_device(weights, 40);
  std::printf("fit, 2 -> 1 workers during validation: max relative difference %.3g\n", diff);
  EXPECT_LT(diff, 1e-5);
  expect_nothing_left(processes, ports);
}

// A job resumed from a checkpoint: a joiner learns the step it resumed from with the commit, so
// every worker of the new generation agrees on "the step resumed from". `loop`: --loop's value.
void expect_resumed_job_to_lose_and_take_back_a_worker(const std::string& loop) {
  TempDir dir;
  const auto ports = free_loopback_ports(3);
  const std::vector<std::string> flags{"--loop", loop, "--checkpoint-dir", dir.file("ckpt")};
  const auto first = with(elastic_args(dir.file("first.safetensors"), 20, 2), flags);
  WorkerProcesses processes;
  start_workers(processes, ports, first, {});
  for (const auto& result : processes.wait_all(120s))
    ASSERT_EQ(result.exit_code, 0) << result.output;
  LossAndJoin resumed;
  resumed.steps = 60, resumed.kill_at = 30, resumed.hold_at = 45;
  resumed.more = flags;
  resumed.resumed_at = 20;
  expect_loss_and_join_end_at_one_device(resumed);
}

TEST(ElasticJobTest, AJobResumedFromACheckpointLosesAndTakesBackAWorker) {
  expect_resumed_job_to_lose_and_take_back_a_worker("custom");
}

// fit resumes through BackupAndRestore in its first generation, from commits in the others.
TEST(ElasticJobTest, AFitResumedFromItsBackupLosesAndTakesBackAWorker) {
  expect_resumed_job_to_lose_and_take_back_a_worker("fit");
}

// Adam divides by the root of its second moments, which amplifies the rounding of a sum taken
// in another order (2 or 3 replicas instead of one): an unresized 3-worker run also drifts from
// one device (docs/elastic.md has the figures), so Adam runs 40 steps, not 150.
TEST(ElasticJobTest, AdamThroughALossAndAJoinEndsAtTheWeightsOfOneDevice) {
  LossAndJoin adam;
  adam.optimizer = "adam";
  adam.steps = 40, adam.kill_at = 15, adam.hold_at = 25;
  adam.tolerance = 1e-4;
  expect_loss_and_join_end_at_one_device(adam);
}

TEST(ElasticJobTest, ASecondLossDuringTheResizeLeavesTheLastWorkerTrainingAlone) {
  TempDir dir;
  const auto ports = free_loopback_ports(3);
  const std::string weights = dir.file("elastic.safetensors");
  WorkerProcesses processes;
  // worker:2 dies as it learns of the first loss, before it says it stays.
  start_workers(processes, ports, elastic_args(weights, 40, 1),
                {{}, {"--kill-at-step", "10"}, {"--kill-on-loss", "seen"}});
  const auto results = processes.wait_all(240s);
  ASSERT_EQ(results[0].exit_code, 0) << results[0].output;
  EXPECT_EQ(results[2].exit_code, 128 + 9);
  EXPECT_TRUE(testing::contains(results[0].output, "sizes 3 -> 1 (lost worker:1,worker:2)"))
      << results[0].output;
  const double diff = difference_from_one_device(weights, 40);
  std::printf("3 -> 1 workers, SGD, 40 steps: max relative difference from one device %.3g\n",
              diff);
  EXPECT_LT(diff, 1e-5);
  expect_nothing_left(processes, ports);
}

// worker:2 dies after the survivors agreed on {worker:0, worker:2}, before their generation
// formed: worker:0 sees it gone while it waits for the rendezvous (its heartbeat stopped), not
// after the rendezvous timeout, and goes on alone.
TEST(ElasticJobTest, ALossAfterTheAgreementIsSeenWhileTheNextGenerationForms) {
  TempDir dir;
  const auto ports = free_loopback_ports(3);
  const std::string weights = dir.file("elastic.safetensors");
  auto args = elastic_args(weights, 40, 1);
  args.insert(args.end(), {"--rendezvous-timeout", "100"});
  WorkerProcesses processes;
  start_workers(processes, ports, args,
                {{}, {"--kill-at-step", "10"}, {"--kill-on-loss", "agreed"}});
  const auto results = processes.wait_all(240s);
  const std::string& out = results[0].output;
  ASSERT_EQ(results[0].exit_code, 0) << out;
  EXPECT_EQ(results[2].exit_code, 128 + 9);
  EXPECT_TRUE(testing::contains(out,
                                "sizes 3 -> 2 (lost worker:1), then sizes 2 -> 1 (lost "
                                "worker:2)"))
      << out;
  EXPECT_TRUE(
      testing::contains(out, "(its heartbeat has not moved for 3 s) stopped before it joined"))
      << out;
  EXPECT_LT(results[0].seconds, 60) << "waited for the rendezvous timeout: " << out;
  // The generation of worker:0 and worker:2 never formed, so it never trained.
  EXPECT_EQ(testing::last_json(out)["worker_sizes"], nlohmann::json({3, 1}));
  const double diff = difference_from_one_device(weights, 40);
  std::printf("3 -> 2 -> 1 workers, SGD, 40 steps: max relative difference %.3g\n", diff);
  EXPECT_LT(diff, 1e-5);
  expect_nothing_left(processes, ports);
}

// A worker that asks to join at the job's last step: no step boundary admits it (under fit the
// last one may not: the next generation would have nothing to run). The job finishes at its
// size, and the joiner learns it and exits 0.
TEST(ElasticJobTest, AJoinerThatAsksAtTheLastStepIsToldTheJobFinished) {
  TempDir dir;
  const auto ports = free_loopback_ports(2);
  const std::string weights = dir.file("elastic.safetensors");
  const std::string go_on = dir.file("joiner-asked");
  // Two epochs of 20 steps and no --max-steps: fit's own end is the last step.
  auto args = with(elastic_args(weights, -1, 1), {"--loop", "fit"});
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--epochs") args[i + 1] = "2";
  WorkerProcesses processes;
  start_workers(
      processes, ports, args,
      {{"--hold-at-step", "39", "--until-file", go_on, "--print-steps"}, {"--kill-at-step", "10"}});
  // The joiner starts once worker:0 holds after step 39, so it asks before step 40.
  ASSERT_TRUE(processes.wait_for_output(0, "killed_train: step 39 done", 120s));
  processes.start(DIST_TRAIN_BINARY, args, {"TF_CONFIG=" + local_tf_config(ports, 1)});
  ASSERT_TRUE(processes.wait_for_output(2, "asked to join", 60s));
  testing::write_file(go_on, "");
  const auto results = processes.wait_all(120s);
  const std::string& chief = results[0].output;
  ASSERT_EQ(results[0].exit_code, 0) << chief;
  EXPECT_EQ(results[2].exit_code, 0) << results[2].output;
  EXPECT_TRUE(testing::contains(results[2].output,
                                "the elastic job finished (at step 40) before a step boundary "
                                "could admit it; nothing to do"))
      << results[2].output;
  EXPECT_EQ(testing::last_json(chief)["worker_sizes"], nlohmann::json({2, 1})) << chief;
  EXPECT_EQ(testing::last_json(chief)["steps"], 40);
  EXPECT_EQ(testing::last_json(chief)["epochs"], 2);
  const double diff = difference_from_one_device(weights, 40);
  std::printf("fit, 2 -> 1 workers, a joiner at the last step: max relative difference %.3g\n",
              diff);
  EXPECT_LT(diff, 1e-5);
  expect_nothing_left(processes, ports);
}

TEST(ElasticJobTest, BelowTheMinimumStopsNamingTheLostWorkerAndTheLastCommittedStep) {
  TempDir dir;
  const auto ports = free_loopback_ports(2);
  WorkerProcesses processes;
  start_workers(processes, ports, elastic_args(dir.file("w.safetensors"), 40, 2),
                {{}, {"--kill-at-step", "5"}});
  const auto results = processes.wait_all(120s);
  const std::string& out = results[0].output;
  EXPECT_EQ(results[0].exit_code, 5) << out;
  EXPECT_TRUE(testing::contains(out, "the elastic job stops: lost worker:1")) << out;
  EXPECT_TRUE(testing::contains(out, "fewer than --min-workers 2")) << out;
  EXPECT_TRUE(testing::contains(out, "the last committed step is 5")) << out;
  expect_nothing_left(processes, ports);
}

TEST(ElasticJobTest, AJoinerWithOtherSettingsIsRefusedNamingTheSetting) {
  TempDir dir;
  const auto ports = free_loopback_ports(2);
  const std::string go_on = dir.file("joiner-refused");
  const auto args = elastic_args(dir.file("w.safetensors"), 30, 1);
  WorkerProcesses processes;
  start_workers(processes, ports, args,
                {{"--hold-at-step", "10", "--until-file", go_on}, {"--kill-at-step", "5"}});
  ASSERT_TRUE(processes.wait_for_output(0, "sizes 2 -> 1 (lost worker:1)", 120s));
  processes.start(DIST_TRAIN_BINARY, with(args, {"--lr", "0.01"}),
                  {"TF_CONFIG=" + local_tf_config(ports, 1)});
  ASSERT_TRUE(processes.wait_for_output(2, "asked to join", 60s));
  testing::write_file(go_on, "");
  const auto results = processes.wait_all(120s);
  EXPECT_EQ(results[2].exit_code, 2) << results[2].output;
  EXPECT_TRUE(testing::contains(results[2].output,
                                "the running job refused worker:1: its --lr is 0.01, the "
                                "running job's is 0.001"))
      << results[2].output;
  ASSERT_EQ(results[0].exit_code, 0) << results[0].output;
  EXPECT_EQ(testing::last_json(results[0].output)["worker_sizes"], nlohmann::json({2, 1}));
  expect_nothing_left(processes, ports);
}

// dist-launch --workers 2:3 runs killed_train on every worker; worker `victim` SIGKILLs itself
// after step 50 of 150, the launcher starts it again and it joins (the job holds at step 100
// until it asked). The weights equal one device's.
void expect_launcher_takes_back(int victim, const std::vector<std::string>& launcher_flags = {}) {
  TempDir dir;
  const std::string weights = dir.file("elastic.safetensors");
  const std::string go_on = dir.file("joiner-asked");
  auto job = elastic_args(weights, 150, 2);
  job.resize(job.size() - 2);  // --min-workers comes from the launcher (DIST_MIN_WORKERS)
  const std::string name = "worker:" + std::to_string(victim);
  const std::vector<std::string> args{"--workers",
                                      "2:3",
                                      "--",
                                      KILLED_TRAIN_BINARY,
                                      "--kill-at-step",
                                      "50",
                                      "--kill-worker",
                                      std::to_string(victim),
                                      "--hold-at-step",
                                      "100",
                                      "--until-file",
                                      go_on};
  WorkerProcesses launcher;
  launcher.start(DIST_LAUNCH_BINARY, with(with(launcher_flags, args), job), {});
  ASSERT_TRUE(launcher.wait_for_output(0, "asked to join", 120s));
  testing::write_file(go_on, "");
  const ProcessResult result = launcher.wait_all(240s).at(0);
  const std::string& out = result.output;
  ASSERT_EQ(result.exit_code, 0) << out;
  EXPECT_TRUE(testing::contains(out, name + " exited with signal 9")) << out;
  EXPECT_TRUE(testing::contains(out, "starting it again to join the running job")) << out;
  EXPECT_TRUE(testing::contains(out, "sizes 3 -> 2 (lost " + name + ")")) << out;
  EXPECT_TRUE(testing::contains(out, "sizes 2 -> 3 (joined " + name + ")")) << out;
  EXPECT_TRUE(testing::contains(out, "\"worker_sizes\":[3,2,3]")) << out;
  const double diff = difference_from_one_device(weights, 150);
  std::printf("dist-launch --workers 2:3, %s lost and back: max relative difference %.3g\n",
              name.c_str(), diff);
  EXPECT_LT(diff, 1e-5);
}

TEST(ElasticJobTest, DistLaunchStartsALostWorkerAgainAndItJoins) { expect_launcher_takes_back(1); }

// worker:0 started the job's store (in dist-store-host, which outlives it): the job goes on
// without it, and it comes back as a joiner.
TEST(ElasticJobTest, TheFirstChiefLostAndStartedAgainJoinsTheJobItStarted) {
  expect_launcher_takes_back(0);
}

// The same with the job's state in etcd (dist-launch --rendezvous): nothing of the job was in
// worker:0's process tree, and the launcher passes DIST_RENDEZVOUS to the worker it starts again.
TEST(ElasticJobTest, DistLaunchOnEtcdStartsTheFirstChiefAgainAndItJoins) {
  testing::EtcdCluster etcd(3);
  if (!etcd.available()) GTEST_SKIP() << etcd.why();
  std::string url = "etcd://";
  for (const auto& member : etcd.clients()) url += member.to_string() + ",";
  url.back() = '/';
  expect_launcher_takes_back(0, {"--rendezvous", url + "dist/launched/"});
}

TEST(ElasticJobTest, FlagsThatCannotKeepTheGlobalBatchAreRefused) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases{
      {{"--strategy", "multi_worker", "--min-workers", "2"}, "needs --global-batch"},
      {{"--strategy", "mirrored", "--min-workers", "2", "--global-batch", "64"},
       "applies to --strategy multi_worker only"},
      {{"--strategy", "multi_worker", "--min-workers", "2", "--global-batch", "64", "--sharding",
        "optimizer"},
       "a sharded state is split by the number of workers"},
  };
  for (const auto& c : cases) {
    WorkerProcesses process;
    process.start(DIST_TRAIN_BINARY, c.args, {});
    const ProcessResult result = process.wait_all(60s).at(0);
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_TRUE(testing::contains(result.output, c.says)) << result.output;
  }
  // A store inside the chief would end with generation 0.
  WorkerProcesses process;
  process.start(
      DIST_TRAIN_BINARY,
      {"--strategy", "multi_worker", "--min-workers", "1", "--global-batch", "64"},
      {"TF_CONFIG=" + local_tf_config(free_loopback_ports(1), 0), "DIST_STORE_HOST=chief"});
  const ProcessResult result = process.wait_all(60s).at(0);
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_TRUE(
      testing::contains(result.output, "needs the rendezvous store in a process of its own"))
      << result.output;
}

}  // namespace
}  // namespace dist
