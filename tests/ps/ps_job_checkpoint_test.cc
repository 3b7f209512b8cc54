// Checkpoints of ParameterServerStrategy jobs of real processes on 127.0.0.1 (ps_task_main.cc
// runs as chief, worker and ps): the chief writes the ps-held variables, their optimizer slots
// and split tables in the format of every other strategy, and a new job restores them onto its
// ps tasks. Every process is bounded in time and killed by the test's end.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/train/checkpoint.h"
#include "dist/train/loss.h"
#include "dist/train/safetensors.h"
#include "equivalence_data.h"
#include "ps/embedding_model.h"
#include "ps/ps_job.h"
#include "test_util.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using namespace ps_jobs;

// The chief writes a checkpoint of the ps-held variables in the existing format: it restores
// under no strategy and MirroredStrategy to the trained values, and a new job that restores it
// starts from those values on its ps tasks (0 further steps: the weights read back from the
// ps tasks are the checkpoint's).
TEST(ParameterServerJobTest, CheckpointOfPsVariablesRestoresAnywhere) {
  testing::TempDir dir;
  const std::string checkpoint = dir.file("ckpt.safetensors");
  const std::vector<std::string> env = {"DIST_TEST_SYNC=1", "DIST_TEST_CHECKPOINT=" + checkpoint};
  {
    Job job(1, 2, {"train", "sgd", "5", dir.file("a.safetensors")}, env);
    auto results = job.processes.wait_all(120s);
    for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << job.describe(results);
  }
  const auto trained = load(dir.file("a.safetensors"));
  for (const Strategy& strategy :
       {get_default_strategy(), Strategy(MirroredStrategy({"cpu:0", "cpu:1"}))}) {
    SCOPED_TRACE(strategy.name());
    torch::manual_seed(1);  // other initial values than the job's
    auto model = strategy.mirror(models::make_tutorial_cnn());
    Checkpoint(model, nullptr).read(checkpoint);
    NamedTensors restored;
    for (const auto& p : model.primary()->named_parameters())
      restored.emplace_back(p.key(), p.value().detach().clone());
    EXPECT_EQ(relative_difference(restored, trained), 0.0);
  }
  {
    Job job(1, 1, {"train", "sgd", "0", dir.file("b.safetensors")}, env);
    auto results = job.processes.wait_all(120s);
    job.expect_zero_step_job_ended(results);
    EXPECT_NE(results[job.chief_process()].output.find("restored"), std::string::npos);
  }
  EXPECT_EQ(relative_difference(load(dir.file("b.safetensors")), trained), 0.0);
}

// One device's checkpoint after the 4 Adam steps the job takes, at `path`.
void write_one_device_adam_checkpoint(const std::string& path) {
  torch::manual_seed(7);
  OneDeviceStrategy strategy;
  auto model = strategy.mirror(models::make_tutorial_cnn());
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3));
  SparseCategoricalCrossentropy loss_fn(true, Reduction::kNone);
  int taken = 0;
  for (const auto& batch :
       strategy.experimental_distribute_dataset(testing::equivalence_data()).iterator()) {
    if (taken++ == 4) break;
    strategy.run(
        [&](const data::Element& b) {
          compute_average_loss(loss_fn(b[1], model->forward(b[0]))).backward();
          optimizer->apply_gradients();
        },
        batch);
  }
  Checkpoint(model, optimizer.get()).write(path);
}

using Named = std::map<std::string, torch::Tensor>;

Named tensors_of(const std::string& path) {
  const auto file = load_safetensors(path);
  return Named(file.tensors.begin(), file.tensors.end());
}

// Adam's slots live beside each variable on the ps tasks. The chief's checkpoint holds them
// as one device's checkpoint after the same 4 steps does; a new job (other sharding) restoring
// it puts values and slots on its ps tasks, and writing it again (0 steps) reads the same back.
TEST(ParameterServerJobTest, CheckpointHoldsTheOptimizerSlotsOfThePsTasks) {
  testing::TempDir dir;
  const std::string checkpoint = dir.file("ckpt.safetensors");
  {
    Job job(1, 2, {"train", "adam", "4", dir.file("a.safetensors")},
            {"DIST_TEST_SYNC=1", "DIST_TEST_PS_SHARDS=2", "DIST_TEST_CHECKPOINT=" + checkpoint});
    auto results = job.processes.wait_all(120s);
    for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << job.describe(results);
  }
  const std::string reference = dir.file("one_device.safetensors");
  write_one_device_adam_checkpoint(reference);
  const Named written = tensors_of(checkpoint), expected = tensors_of(reference);
  ASSERT_EQ(written.size(), expected.size());
  int slots = 0;
  for (const auto& [name, tensor] : expected) {
    SCOPED_TRACE(name);
    ASSERT_EQ(written.count(name), 1u);
    if (name.rfind("rng/", 0) == 0) continue;  // the writing process's random state
    EXPECT_LT(testing::max_relative_difference({written.at(name).to(torch::kDouble)},
                                               {tensor.to(torch::kDouble)}),
              1e-6);
    slots += name.find("/exp_avg_sq") != std::string::npos;
  }
  EXPECT_EQ(slots, 8);  // one per parameter of the tutorial CNN

  const std::string again = dir.file("again.safetensors");
  std::filesystem::copy_file(checkpoint, again);
  {
    Job job(1, 1, {"train", "adam", "0", dir.file("b.safetensors")},
            {"DIST_TEST_SYNC=1", "DIST_TEST_CHECKPOINT=" + again});
    auto results = job.processes.wait_all(120s);
    job.expect_zero_step_job_ended(results);
  }
  const Named rewritten = tensors_of(again);
  ASSERT_EQ(rewritten.size(), written.size());
  for (const auto& [name, tensor] : written) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(torch::equal(rewritten.at(name), tensor));
  }
}

// Adagrad's sparse updates reach only the shard the ids fall in (all below 400: shard 0 of a
// 1000-row table split in 2). The chief's checkpoint still holds whole slots, the untouched
// shard's at Adagrad's initial state, and equals one device's after the same steps.
TEST(ParameterServerJobTest, CheckpointOfASplitTableWithAnUntouchedShard) {
  testing::TempDir dir;
  const std::string checkpoint = dir.file("ps.safetensors"),
                    reference = dir.file("one.safetensors");
  Job job(1, 2, {"embedding", "1000", "8", "5", "-"},
          {"DIST_TEST_PS_SHARDS=2", "DIST_TEST_OPTIMIZER=adagrad", "DIST_TEST_ID_LIMIT=400",
           "DIST_TEST_CHECKPOINT=" + checkpoint});
  auto results = job.processes.wait_all(120s);
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << job.describe(results);
  testing::train_embedding_steps(OneDeviceStrategy(), 1000, 8, 5, "adagrad", 400, reference);
  const auto written = load_safetensors(checkpoint), expected = load_safetensors(reference);
  ASSERT_EQ(written.tensors.size(), expected.tensors.size());
  for (size_t i = 0; i < expected.tensors.size(); ++i) {
    const auto& [name, tensor] = expected.tensors[i];
    SCOPED_TRACE(name);
    ASSERT_EQ(written.tensors[i].first, name);
    if (name.rfind("rng/", 0) == 0) continue;  // the writing process's random state
    EXPECT_LT(testing::max_relative_difference({written.tensors[i].second.to(torch::kDouble)},
                                               {tensor.to(torch::kDouble)}),
              1e-6);
  }
}

}  // namespace
}  // namespace dist
