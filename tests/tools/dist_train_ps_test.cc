// dist-train --strategy parameter_server: jobs that dist-launch --ps starts on 127.0.0.1, on
// real Fashion-MNIST, in both loops; each bounded in time (timeout -s KILL around the launcher,
// which takes its tasks with it).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/distribute/local_cluster.h"
#include "multi_worker/process_group.h"
#include "run_program.h"
#include "test_util.h"
#include "tfrecord_reader.h"

namespace dist {
namespace {

using testing::CommandResult;
using testing::run_shell;

// The last line task `task` printed (dist-launch prefixes each with "[task] ").
std::string last_line_of(const std::string& output, const std::string& task) {
  const std::string prefix = "[" + task + "] ";
  std::istringstream lines(output);
  std::string line, last;
  while (std::getline(lines, line))
    if (line.rfind(prefix, 0) == 0) last = line.substr(prefix.size());
  return last;
}

// 2 workers + 1 ps + the chief, each running dist-train: 640 examples in steps of 32, so one
// pass (an epoch, derived) is 20 steps. The chief's last line is the same JSON as under the
// other strategies; it writes the checkpoints and the weights; every task exits 0.
TEST(DistTrainParameterServerTest, LaunchedJobTrainsOnFashionMnistInBothLoops) {
  for (const std::string loop : {"custom", "fit"}) {
    SCOPED_TRACE(loop);
    testing::TempDir dir;
    // The fit loop runs a second epoch and stops at --max-steps 33 within it: exactly 33 steps
    // are scheduled although several run at once (its logs are the first epoch's).
    const std::string epochs = loop == "fit" ? " --epochs 2 --max-steps 33" : " --epochs 1";
    const CommandResult job =
        run_shell(std::string(DIST_LAUNCH_BINARY) + " --workers 2 --ps 1 -- " + DIST_TRAIN_BINARY +
                      " --strategy parameter_server --loop " + loop +
                      " --train-examples 640 --batch-per-replica 32 --optimizer adam"
                      " --lr 0.001 --no-progress --collective-timeout 30 --rendezvous-timeout 30"
                      " --checkpoint-dir " +
                      dir.file("ckpt") + " --save-weights " + dir.file("w.safetensors") + epochs,
                  180);
    ASSERT_EQ(job.exit_code, 0) << job.output;
    EXPECT_TRUE(testing::contains(job.output,
                                  "[chief] Steps per epoch: 20 (scheduled on the workers; one "
                                  "pass of the training data)"))
        << job.output;
    const std::string json = last_line_of(job.output, "chief");
    ASSERT_EQ(json.rfind("{", 0), 0u) << "the chief's last line is not the JSON\n" << job.output;
    const auto result = nlohmann::json::parse(json);
    EXPECT_EQ(result["strategy"], "parameter_server");
    EXPECT_EQ(result["num_replicas_in_sync"], 1);
    EXPECT_EQ(result["global_batch"], 32);
    EXPECT_EQ(result["steps"], loop == "fit" ? 33 : 20);
    EXPECT_EQ(result["epochs"], 1);
    EXPECT_GT(result["images_per_sec"].get<double>(), 0);
    EXPECT_TRUE(result["train_loss"].get<double>() > 0 && result["train_loss"].get<double>() < 10)
        << json;
    // Chance is 0.1. Adam's 20 (fit: 33) asynchronous steps on 640 examples reached 0.40-0.50
    // in 6 runs (test loss 1.3-1.96). Plain SGD at 0.05 was still at the very start of learning
    // after 20 steps (test loss 2.274 against 2.30 at chance), where the accuracy swings from
    // 0.10 (a CI run) to 0.25: it could not say whether training happened.
    EXPECT_GT(result["test_accuracy"].get<double>(), 0.25) << json;
    for (const std::string task : {"worker:0", "worker:1", "ps:0"}) {
      EXPECT_TRUE(testing::contains(job.output, "[dist-launch] " + task + " exited with code 0"))
          << job.output;
      EXPECT_EQ(last_line_of(job.output, task).rfind("{", 0), std::string::npos)
          << task << " printed a result\n"
          << job.output;
    }
    EXPECT_TRUE(std::filesystem::exists(dir.file("w.safetensors"))) << job.output;
    // The last checkpoint records the last step. Within fit's second epoch the only save is
    // the stop's, written once every scheduled step had finished (none for steps 21..32).
    std::set<std::string> checkpoints;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.file("ckpt")))
      if (entry.path().extension() == ".safetensors")
        checkpoints.insert(entry.path().filename().string());
    const std::string last = loop == "fit" ? "ckpt-33.safetensors" : "ckpt-20.safetensors";
    EXPECT_EQ(checkpoints.count(last), 1u) << "no " << last << " in " << dir.file("ckpt") << "\n"
                                           << job.output;
    for (int step = 21; step < 33; ++step)
      EXPECT_EQ(checkpoints.count("ckpt-" + std::to_string(step) + ".safetensors"), 0u) << step;
  }
}

// The ResNet's synchronized batch normalization under parameter servers: each worker's step
// normalizes over its own batch (workers step apart: no global batch), and says so once.
TEST(DistTrainParameterServerTest, SynchronizedBatchNormIsWorkerLocalWithAWarning) {
  const CommandResult job = run_shell(
      std::string(DIST_LAUNCH_BINARY) + " --workers 1 --ps 1 -- " + DIST_TRAIN_BINARY +
          " --strategy parameter_server --model resnet --train-examples 96"
          " --test-examples 64 --batch-per-replica 32 --epochs 1 --optimizer sgd --lr 0.01"
          " --no-progress --collective-timeout 30 --rendezvous-timeout 30",
      180);
  ASSERT_EQ(job.exit_code, 0) << job.output;
  const std::string warning =
      "warning: synchronized batch normalization under ParameterServerStrategy normalizes over "
      "each worker's own batch";
  size_t said = 0;
  for (size_t at = job.output.find(warning); at != std::string::npos;
       at = job.output.find(warning, at + 1))
    ++said;
  EXPECT_EQ(said, 1u) << job.output;
  EXPECT_TRUE(testing::contains(job.output, "[worker:0] " + warning)) << job.output;
  const auto result = nlohmann::json::parse(last_line_of(job.output, "chief"));
  EXPECT_EQ(result["steps"], 3);
  EXPECT_TRUE(std::isfinite(result["train_loss"].get<double>())) << job.output;
}

// The scalars of the one event file in `dir`.
std::vector<testing::ScalarEvent> scalar_events_in(const std::string& dir,
                                                   const std::string& work_dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    files.push_back(entry.path().string());
  EXPECT_EQ(files.size(), 1u) << dir;
  if (files.empty()) return {};
  std::string error;
  auto events = testing::read_scalar_events(files[0], work_dir, &error);
  EXPECT_EQ(error, "") << files[0];
  return events;
}

// An evaluator job: the loop, its flags, and the steps of its first and last checkpoints.
struct EvaluatorCase {
  std::string loop, flags;
  int64_t first_checkpoint, final_step;
};

// TensorBoard: each evaluation's scalars at its checkpoint's step, the last at the final, with
// the figures of the evaluator's result.
void expect_evaluation_scalars(const testing::TempDir& dir, const EvaluatorCase& c,
                               const nlohmann::json& evaluator, int64_t evaluations) {
  const auto events = scalar_events_in(dir.file("logs/evaluation"), dir.path());
  ASSERT_EQ(events.size(), static_cast<size_t>(2 * evaluations));
  std::map<std::string, testing::ScalarEvent> last;
  for (const auto& e : events) last[e.tag] = e;
  ASSERT_EQ(last.count("evaluation_accuracy_vs_iterations"), 1u);
  ASSERT_EQ(last.count("evaluation_loss_vs_iterations"), 1u);
  EXPECT_EQ(last["evaluation_accuracy_vs_iterations"].step, c.final_step);
  for (const auto& e : events)
    EXPECT_TRUE(e.step == c.first_checkpoint || e.step == c.final_step) << e.tag << " " << e.step;
  EXPECT_EQ(last["evaluation_accuracy_vs_iterations"].value,
            static_cast<float>(evaluator["test_accuracy"].get<double>()));
  EXPECT_EQ(last["evaluation_loss_vs_iterations"].value,
            static_cast<float>(evaluator["test_loss"].get<double>()));
}

// dist-launch --evaluator: the evaluator task (the same dist-train command) evaluates the
// chief's checkpoints as they come, writes TensorBoard scalars, and exits by itself after the
// checkpoint of the last step, which it counts from the flags as the chief does: here
// --global-batch and --steps-per-epoch (custom: 2 x 15 = 30), and --max-steps within the second
// epoch (fit: 33 of 2 x 20). Its last evaluation is of the weights the chief evaluated last, on
// the same test batches: the same figures.
TEST(DistTrainParameterServerTest, EvaluatorTaskEvaluatesTheCheckpointsUntilTheLast) {
  for (const EvaluatorCase& c :
       {EvaluatorCase{"custom", " --global-batch 32 --steps-per-epoch 15", 15, 30},
        EvaluatorCase{"fit", " --batch-per-replica 32 --max-steps 33", 20, 33}}) {
    SCOPED_TRACE(c.loop);
    testing::TempDir dir;
    const CommandResult job = run_shell(
        std::string(DIST_LAUNCH_BINARY) + " --workers 2 --ps 1 --evaluator -- " +
            DIST_TRAIN_BINARY + " --strategy parameter_server --loop " + c.loop + c.flags +
            " --train-examples 640 --epochs 2 --optimizer sgd --lr 0.05 --no-progress"
            " --collective-timeout 30 --rendezvous-timeout 30 --evaluator-timeout 120"
            " --checkpoint-dir " +
            dir.file("ckpt") + " --log-dir " + dir.file("logs"),
        240);
    ASSERT_EQ(job.exit_code, 0) << job.output;
    EXPECT_TRUE(testing::contains(job.output, "[dist-launch] evaluator exited with code 0"))
        << job.output;
    EXPECT_FALSE(testing::contains(job.output, "SIGTERM")) << job.output;
    EXPECT_FALSE(testing::contains(job.output, "dist-launch: warning")) << job.output;
    const std::string final_step = std::to_string(c.final_step);
    EXPECT_TRUE(testing::contains(
        job.output, "[evaluator] Evaluator: evaluating the checkpoints in " + dir.file("ckpt") +
                        " on the test set until step " + final_step))
        << job.output;
    const std::string evaluator_json = last_line_of(job.output, "evaluator");
    const std::string chief_json = last_line_of(job.output, "chief");
    ASSERT_EQ(evaluator_json.rfind("{", 0), 0u) << job.output;
    ASSERT_EQ(chief_json.rfind("{", 0), 0u) << job.output;
    const auto evaluator = nlohmann::json::parse(evaluator_json);
    const auto chief = nlohmann::json::parse(chief_json);
    EXPECT_EQ(evaluator["task"], "evaluator");
    EXPECT_EQ(chief["steps"], c.final_step);
    EXPECT_EQ(evaluator["final_step"], c.final_step);
    EXPECT_EQ(evaluator["step"], c.final_step);
    EXPECT_EQ(evaluator["checkpoint"], dir.file("ckpt") + "/ckpt-" + final_step + ".safetensors");
    // Checkpoints at the first epoch's end and the last step; the first may be passed over.
    const int64_t evaluations = evaluator["evaluations"].get<int64_t>();
    EXPECT_TRUE(evaluations == 1 || evaluations == 2) << evaluator_json;
    EXPECT_EQ(evaluator["test_accuracy"].get<double>(), chief["test_accuracy"].get<double>())
        << evaluator_json << "\n"
        << chief_json;
    EXPECT_NEAR(evaluator["test_loss"].get<double>(), chief["test_loss"].get<double>(),
                1e-6 * chief["test_loss"].get<double>())
        << evaluator_json << "\n"
        << chief_json;

    ASSERT_NO_FATAL_FAILURE(expect_evaluation_scalars(dir, c, evaluator, evaluations));
  }
}

// The evaluator task run by hand (TF_CONFIG naming it): without --checkpoint-dir it has nothing
// to watch (exit 2, naming the flag); with a directory no chief writes to, it gives up after
// --evaluator-timeout (exit 3, naming the directory). No other task is needed for either.
TEST(DistTrainParameterServerTest, EvaluatorTaskRefusesNoCheckpointDirAndGivesUpOnSilence) {
  testing::TempDir dir;
  const std::string tf_config =
      R"('{"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"],)"
      R"( "ps": ["127.0.0.1:3"], "evaluator": ["127.0.0.1:4"]},)"
      R"( "task": {"type": "evaluator", "index": 0}}')";
  const std::string command =
      "env TF_CONFIG=" + tf_config + " " + DIST_TRAIN_BINARY + " --strategy parameter_server";
  const CommandResult no_dir = run_shell(command, 60);
  EXPECT_EQ(no_dir.exit_code, 2) << no_dir.output;
  EXPECT_TRUE(testing::contains(no_dir.output, "give every task the same --checkpoint-dir"))
      << no_dir.output;

  const CommandResult silent =
      run_shell(command + " --evaluator-timeout 1 --checkpoint-dir " + dir.file("ckpt"), 60);
  EXPECT_EQ(silent.exit_code, 3) << silent.output;
  EXPECT_TRUE(
      testing::contains(silent.output, "no new checkpoint in " + dir.file("ckpt") + " for 1 s"))
      << silent.output;
  EXPECT_TRUE(testing::contains(silent.output, "none evaluated yet")) << silent.output;
}

// A ps or worker task whose chief never comes serves for --collective-timeout (300 s here)
// before giving up; a SIGTERM meanwhile (a job scheduler, dist-launch stopping the job) must end
// it at once, with exit 4 (stopped by a signal), not be ignored until the timeout.
TEST(DistTrainParameterServerTest, TasksWaitingForAChiefThatNeverComesStopOnSigterm) {
  const auto ports = free_loopback_ports(3);
  for (const std::string loop : {"custom", "fit"}) {
    for (const std::string type : {"ps", "worker"}) {
      const std::string tf_config =
          R"({"cluster": {"chief": ["127.0.0.1:)" + std::to_string(ports[0]) +
          R"("], "worker": ["127.0.0.1:)" + std::to_string(ports[1]) + R"("], "ps": ["127.0.0.1:)" +
          std::to_string(ports[2]) + R"("]}, "task": {"type": ")" + type + R"(", "index": 0}})";
      const std::string what = "--loop " + loop + ", " + type + " task";
      testing::WorkerProcesses task;
      task.start(DIST_TRAIN_BINARY,
                 {"--strategy", "parameter_server", "--loop", loop, "--collective-timeout", "300",
                  "--no-progress"},
                 {"TF_CONFIG=" + tf_config});
      ASSERT_TRUE(task.wait_for_output(0, ": serving", std::chrono::seconds(60))) << what;
      const auto signalled = std::chrono::steady_clock::now();
      task.kill(0, SIGTERM);
      const auto result = task.wait_all(std::chrono::seconds(30)).at(0);
      EXPECT_LT(std::chrono::steady_clock::now() - signalled, std::chrono::seconds(5)) << what;
      EXPECT_EQ(result.exit_code, 4) << what << ": " << result.output;
      EXPECT_TRUE(testing::contains(result.output, "stopped by signal 15 while serving"))
          << what << ": " << result.output;
    }
  }
}

// fit's BackupAndRestore cannot save within an epoch under this strategy; dist-train says so
// by its own flag on every task before training (exit 2), instead of the chief failing alone.
TEST(DistTrainParameterServerTest, FitRefusesCheckpointEveryByName) {
  testing::TempDir dir;
  const CommandResult job = run_shell(
      std::string(DIST_LAUNCH_BINARY) + " --workers 1 --ps 1 -- " + DIST_TRAIN_BINARY +
          " --strategy parameter_server --loop fit --checkpoint-every 5 --checkpoint-dir " +
          dir.file("ckpt") + " --no-progress --collective-timeout 30",
      120);
  EXPECT_EQ(job.exit_code, 2) << job.output;
  for (const std::string task : {"chief", "worker:0", "ps:0"}) {
    EXPECT_TRUE(
        testing::contains(job.output, "[" + task +
                                          "] dist-train: --checkpoint-every 5 is not supported "
                                          "with --loop fit under --strategy parameter_server"))
        << task << "\n"
        << job.output;
    EXPECT_TRUE(testing::contains(job.output, "[dist-launch] " + task + " exited with code 2"))
        << job.output;
  }
}

TEST(DistTrainParameterServerTest, StepsPerEpochIsRefusedUnderOtherStrategies) {
  const CommandResult r =
      run_shell(std::string(DIST_TRAIN_BINARY) + " --strategy one_device --steps-per-epoch 5", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(
      testing::contains(r.output, "--steps-per-epoch applies to --strategy parameter_server only"))
      << r.output;
}

}  // namespace
}  // namespace dist
