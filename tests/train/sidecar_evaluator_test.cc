// SidecarEvaluator against a "chief" thread that writes checkpoints through a CheckpointManager
// while the evaluator watches: each checkpoint's weights encode its step, so every evaluation
// can be checked against the checkpoint it claims to have read.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/train/checkpoint.h"
#include "dist/train/sidecar_evaluator.h"
#include "test_util.h"
#include "tfrecord_reader.h"

namespace dist {
namespace {

using std::chrono::milliseconds;

// A model whose every weight is `step` once the checkpoint of that step is read.
torch::nn::Linear linear_model() { return torch::nn::Linear(3, 2); }

void write_checkpoint(CheckpointManager& manager, int64_t step) {
  auto model = linear_model();
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.fill_(static_cast<double>(step));
  }
  Checkpoint checkpoint(model.ptr(), nullptr);
  checkpoint.state.step = step;
  manager.save(checkpoint);
}

SidecarEvaluatorOptions quick_options(const std::string& dir) {
  SidecarEvaluatorOptions options;
  options.checkpoint_dir = dir;
  options.timeout = milliseconds(2000);
  options.poll_interval = milliseconds(5);
  return options;
}

// The mean weight of the restored model: the step of the checkpoint it came from.
SidecarEvaluator::Evaluate mean_weight(const torch::nn::Linear& model) {
  return [model] {
    double sum = 0;
    int64_t count = 0;
    for (const auto& p : model->parameters()) {
      sum += p.sum().item<double>();
      count += p.numel();
    }
    return std::map<std::string, double>{{"weight", sum / static_cast<double>(count)}};
  };
}

TEST(SidecarEvaluatorTest, EvaluatesCheckpointsAsTheyComeUntilTheFinalStep) {
  testing::TempDir dir;
  auto model = linear_model();
  SidecarEvaluatorOptions options = quick_options(dir.file("ckpts"));
  options.log_dir = dir.file("eval");
  options.final_step = 30;
  // The chief: a checkpoint every 50 ms, max_to_keep 2 (so one may be gone before it is read).
  std::thread chief([&] {
    CheckpointManager manager(dir.file("ckpts"), 2);
    for (int64_t step = 10; step <= 30; step += 10) {
      std::this_thread::sleep_for(milliseconds(50));
      write_checkpoint(manager, step);
    }
  });
  std::vector<Evaluation> seen;
  SidecarEvaluator evaluator(Checkpoint(model.ptr(), nullptr), mean_weight(model), options);
  const auto evaluations = evaluator.run([&](const Evaluation& e) { seen.push_back(e); });
  chief.join();

  ASSERT_FALSE(evaluations.empty());
  EXPECT_EQ(seen.size(), evaluations.size());
  EXPECT_EQ(evaluations.back().step, 30);
  EXPECT_EQ(evaluations.back().checkpoint, dir.file("ckpts") + "/ckpt-30.safetensors");
  int64_t previous = 0;
  for (const auto& e : evaluations) {
    EXPECT_GT(e.step, previous) << "each checkpoint once, in order";
    previous = e.step;
    EXPECT_DOUBLE_EQ(e.metrics.at("weight"), static_cast<double>(e.step)) << e.checkpoint;
  }

  // TensorBoard: one scalar per evaluation, at the checkpoint's step.
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("eval")))
    files.push_back(entry.path().string());
  ASSERT_EQ(files.size(), 1u);
  std::string error;
  const auto events = testing::read_scalar_events(files[0], dir.path(), &error);
  EXPECT_EQ(error, "");
  ASSERT_EQ(events.size(), evaluations.size());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].tag, "evaluation_weight_vs_iterations");
    EXPECT_EQ(events[i].step, evaluations[i].step);
    EXPECT_EQ(events[i].value, static_cast<float>(evaluations[i].step));
  }
}

// Opening ckpt-1 for reading first lets the chief save ckpt-2 with max_to_keep 1, which deletes
// ckpt-1: the race between the evaluator's look at the pointer and its read, made certain.
class ChiefOvertakesEnv : public EnvWrapper {
 public:
  explicit ChiefOvertakesEnv(std::string dir) : EnvWrapper(Env::Default()), dir_(std::move(dir)) {}
  std::unique_ptr<RandomAccessFile> new_random_access_file(const std::string& path) override {
    if (!overtaken_ && path == dir_ + "/ckpt-1.safetensors") {
      overtaken_ = true;
      CheckpointManager manager(dir_, 1);
      write_checkpoint(manager, 2);
    }
    return EnvWrapper::new_random_access_file(path);
  }
  bool overtaken_ = false;

 private:
  std::string dir_;
};

TEST(SidecarEvaluatorTest, CheckpointDeletedBeforeItIsReadIsPassedOverForTheNewerOne) {
  testing::TempDir dir;
  {
    CheckpointManager manager(dir.file("ckpts"), 1);
    write_checkpoint(manager, 1);
  }
  ChiefOvertakesEnv env(dir.file("ckpts"));
  auto model = linear_model();
  SidecarEvaluatorOptions options = quick_options(dir.file("ckpts"));
  options.final_step = 2;
  options.env = &env;
  const auto evaluations =
      SidecarEvaluator(Checkpoint(model.ptr(), nullptr), mean_weight(model), options).run();
  EXPECT_TRUE(env.overtaken_);
  EXPECT_FALSE(std::filesystem::exists(dir.file("ckpts") + "/ckpt-1.safetensors"));
  ASSERT_EQ(evaluations.size(), 1u);
  EXPECT_EQ(evaluations[0].step, 2);
  EXPECT_DOUBLE_EQ(evaluations[0].metrics.at("weight"), 2.0);
}

// An overflowed deadline would lie in the past: the evaluator would give up before the
// checkpoint that comes 100 ms later.
TEST(SidecarEvaluatorTest, CenturiesOfTimeoutMeanNoLimitNotAnOverflow) {
  testing::TempDir dir;
  std::thread chief([&] {
    std::this_thread::sleep_for(milliseconds(100));
    CheckpointManager manager(dir.file("ckpts"), 3);
    write_checkpoint(manager, 1);
  });
  auto model = linear_model();
  SidecarEvaluatorOptions options = quick_options(dir.file("ckpts"));
  options.timeout = milliseconds::max();
  options.max_evaluations = 1;
  std::vector<Evaluation> evaluations;
  EXPECT_NO_THROW(
      evaluations =
          SidecarEvaluator(Checkpoint(model.ptr(), nullptr), mean_weight(model), options).run());
  chief.join();
  ASSERT_EQ(evaluations.size(), 1u);
  EXPECT_EQ(evaluations[0].step, 1);
}

TEST(SidecarEvaluatorTest, FinalCheckpointAlreadyThereIsEvaluatedAtOnce) {
  testing::TempDir dir;
  {
    CheckpointManager manager(dir.file("ckpts"), 3);
    for (int64_t step : {5, 10}) write_checkpoint(manager, step);
  }
  auto model = linear_model();
  SidecarEvaluatorOptions options = quick_options(dir.file("ckpts"));
  options.final_step = 10;
  options.timeout = milliseconds(60'000);  // must not be waited for
  const auto start = std::chrono::steady_clock::now();
  const auto evaluations =
      SidecarEvaluator(Checkpoint(model.ptr(), nullptr), mean_weight(model), options).run();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  ASSERT_EQ(evaluations.size(), 1u) << "only the latest of those waiting";
  EXPECT_EQ(evaluations[0].step, 10);
  EXPECT_DOUBLE_EQ(evaluations[0].metrics.at("weight"), 10.0);
}

TEST(SidecarEvaluatorTest, StopsAfterMaxEvaluations) {
  testing::TempDir dir;
  CheckpointManager manager(dir.file("ckpts"), 3);
  write_checkpoint(manager, 7);
  auto model = linear_model();
  SidecarEvaluatorOptions options = quick_options(dir.file("ckpts"));
  options.max_evaluations = 1;
  const auto evaluations =
      SidecarEvaluator(Checkpoint(model.ptr(), nullptr), mean_weight(model), options).run();
  ASSERT_EQ(evaluations.size(), 1u);
  EXPECT_EQ(evaluations[0].step, 7);
}

TEST(SidecarEvaluatorTest, TimeoutBeforeTheFinalStepIsADataErrorNamingTheDirectory) {
  testing::TempDir dir;
  CheckpointManager manager(dir.file("ckpts"), 3);
  write_checkpoint(manager, 4);
  auto model = linear_model();
  SidecarEvaluatorOptions options = quick_options(dir.file("ckpts"));
  options.final_step = 8;
  options.timeout = milliseconds(200);
  int evaluated = 0;
  try {
    SidecarEvaluator(Checkpoint(model.ptr(), nullptr), mean_weight(model), options)
        .run([&](const Evaluation&) { ++evaluated; });
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(dir.file("ckpts")), std::string::npos) << message;
    EXPECT_NE(message.find("the last evaluated is at step 4"), std::string::npos) << message;
    EXPECT_NE(message.find("the final step is 8"), std::string::npos) << message;
  }
  EXPECT_EQ(evaluated, 1);
}

TEST(SidecarEvaluatorTest, WithoutAnEndTheTimeoutEndsTheRunNormally) {
  testing::TempDir dir;
  auto model = linear_model();
  SidecarEvaluatorOptions options = quick_options(dir.file("ckpts"));
  options.timeout = milliseconds(100);
  const auto evaluations =
      SidecarEvaluator(Checkpoint(model.ptr(), nullptr), mean_weight(model), options).run();
  EXPECT_TRUE(evaluations.empty());
  EXPECT_TRUE(std::filesystem::is_directory(dir.file("ckpts"))) << "made, to be watched";
}

TEST(SidecarEvaluatorTest, DamagedLatestCheckpointIsADataErrorNamingIt) {
  testing::TempDir dir;
  CheckpointManager manager(dir.file("ckpts"), 3);
  write_checkpoint(manager, 3);
  const std::string path = dir.file("ckpts") + "/ckpt-3.safetensors";
  std::string bytes = testing::read_file(path);
  bytes[bytes.size() - 2] ^= 0x10;  // a flipped bit in the last tensor
  testing::write_file(path, bytes);
  auto model = linear_model();
  SidecarEvaluatorOptions options = quick_options(dir.file("ckpts"));
  options.final_step = 3;
  try {
    SidecarEvaluator(Checkpoint(model.ptr(), nullptr), mean_weight(model), options).run();
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(SidecarEvaluatorTest, BadOptionsAreRefusedByName) {
  auto model = linear_model();
  auto make = [&](SidecarEvaluatorOptions options) {
    SidecarEvaluator(Checkpoint(model.ptr(), nullptr), mean_weight(model), options);
  };
  SidecarEvaluatorOptions options;
  EXPECT_THROW(make(options), InvalidArgument);  // no directory
  options.checkpoint_dir = "/tmp/unused";
  options.final_step = 0;
  EXPECT_THROW(make(options), InvalidArgument);
  options.final_step = -1;
  options.max_evaluations = 0;
  EXPECT_THROW(make(options), InvalidArgument);
  options.max_evaluations = -1;
  options.timeout = milliseconds(0);
  EXPECT_THROW(make(options), InvalidArgument);
  try {
    SidecarEvaluatorOptions bad;
    bad.checkpoint_dir = "/tmp/unused";
    bad.final_step = -5;
    make(bad);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("final_step"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dist
