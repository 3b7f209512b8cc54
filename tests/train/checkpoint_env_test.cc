// Checkpoints and safetensors files through an Env: the exact order of a save's file-system
// operations, and a full disk (an Env whose appends fail past a byte budget) at each point of
// a save.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <functional>

#include "dist/core/error.h"
#include "dist/train/checkpoint.h"
#include "dist/train/safetensors.h"
#include "test_envs.h"
#include "test_util.h"

namespace dist {
namespace {

using testing::DiskFullEnv;
using testing::files_in;
using testing::RecordingEnv;

std::shared_ptr<torch::nn::LinearImpl> linear_model(int seed) {
  torch::manual_seed(seed);
  return torch::nn::Linear(4, 3).ptr();
}

bool has_temporary(const std::string& dir) {
  for (const auto& name : files_in(dir))
    if (name.find(".tmp.") != std::string::npos) return true;
  return false;
}

TEST(CheckpointEnvTest, ASaveWritesSyncsAndRenamesTheFileThenThePointerThenDeletesTheOldest) {
  testing::TempDir dir;
  RecordingEnv env(dir.path());
  CheckpointManager manager(dir.path(), 1, &env);
  Checkpoint checkpoint(linear_model(1), nullptr);
  checkpoint.save_random_state = false;
  checkpoint.state.step = 1;
  manager.save(checkpoint);
  checkpoint.state.step = 2;
  const size_t before = env.operations().size();
  manager.save(checkpoint);

  const auto all = env.operations();
  std::vector<std::string> second(all.begin() + static_cast<std::ptrdiff_t>(before), all.end());
  // The appends' sizes depend on the header; only their files are checked.
  for (auto& op : second)
    if (op.rfind("append ", 0) == 0) op = op.substr(0, op.rfind(' '));
  second.erase(std::unique(second.begin(), second.end()), second.end());
  EXPECT_EQ(second, (std::vector<std::string>{
                        "new_writable_file ckpt-2.safetensors.tmp.<pid>",
                        "append ckpt-2.safetensors.tmp.<pid>",
                        "sync ckpt-2.safetensors.tmp.<pid>",
                        "close ckpt-2.safetensors.tmp.<pid>",
                        "rename_file ckpt-2.safetensors.tmp.<pid> ckpt-2.safetensors",
                        "sync_dir .",
                        "file_exists checkpoint",  // the pointer, once the checkpoint is whole
                        "new_random_access_file checkpoint",
                        "get_children .",  // leftovers, once every piece is written
                        "new_writable_file checkpoint.tmp.<pid>",
                        "append checkpoint.tmp.<pid>",
                        "sync checkpoint.tmp.<pid>",
                        "close checkpoint.tmp.<pid>",
                        "rename_file checkpoint.tmp.<pid> checkpoint",
                        "sync_dir .",
                        "remove_file ckpt-1.safetensors",
                    }));
  EXPECT_EQ(env.operations().front(), "create_dirs .");
  EXPECT_EQ(files_in(dir.path()), (std::vector<std::string>{"checkpoint", "ckpt-2.safetensors"}));
  EXPECT_EQ(env.appended(dir.file("ckpt-2.safetensors.tmp." + std::to_string(::getpid()))),
            testing::read_file(dir.file("ckpt-2.safetensors")));

  // Reading goes through the Env too.
  const size_t read_from = env.operations().size();
  Checkpoint reader(linear_model(2), nullptr);
  reader.read(*manager.latest(), &env);
  EXPECT_EQ(reader.state.step, 2);
  EXPECT_EQ(env.operations()[read_from], "file_exists checkpoint");
  EXPECT_EQ(env.operations().back(), "new_random_access_file ckpt-2.safetensors");
}

// Where the disk fills up, as bytes left after the first checkpoint (whose size the second
// has too: same tensors, same-length metadata).
struct DiskFull {
  const char* name;
  std::function<uint64_t(uint64_t checkpoint_bytes)> capacity;
  const char* failing_file;  // named in the error
};

class CheckpointDiskFullTest : public ::testing::TestWithParam<DiskFull> {};

TEST_P(CheckpointDiskFullTest, SaveThrowsNamingTheFileAndThePreviousCheckpointStaysLatest) {
  testing::TempDir dir;
  auto model = linear_model(1);
  torch::optim::Adam adam(model->parameters());
  Checkpoint checkpoint(model, &adam);
  CheckpointManager manager(dir.path(), 3);
  checkpoint.state.step = 1;
  const std::string previous = manager.save(checkpoint);
  const auto saved_weight = model->weight.detach().clone();
  {
    torch::NoGradGuard no_grad;
    model->weight.add_(1);
  }

  DiskFullEnv full(GetParam().capacity(std::filesystem::file_size(previous)));
  CheckpointManager on_full_disk(dir.path(), 3, &full);
  checkpoint.state.step = 2;
  try {
    on_full_disk.save(checkpoint);
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'" + dir.file(GetParam().failing_file) + "'"), std::string::npos) << what;
    EXPECT_NE(what.find("No space left on device"), std::string::npos) << what;
  }
  EXPECT_FALSE(has_temporary(dir.path())) << ::testing::PrintToString(files_in(dir.path()));
  EXPECT_EQ(manager.latest(), previous);
  EXPECT_EQ(on_full_disk.latest(), previous);
  auto reader_model = linear_model(2);
  Checkpoint reader(reader_model, nullptr);
  reader.read(previous);
  EXPECT_EQ(reader.state.step, 1);
  EXPECT_TRUE(torch::equal(reader_model->weight, saved_weight));

  // The next save that has room completes and leaves no temporary file behind.
  checkpoint.state.step = 3;
  EXPECT_EQ(manager.save(checkpoint), dir.file("ckpt-3.safetensors"));
  EXPECT_EQ(manager.latest(), dir.file("ckpt-3.safetensors"));
  EXPECT_FALSE(has_temporary(dir.path())) << ::testing::PrintToString(files_in(dir.path()));
  reader.read(*manager.latest());
  EXPECT_TRUE(torch::equal(reader_model->weight, model->weight));
}

INSTANTIATE_TEST_SUITE_P(
    Checkpoint, CheckpointDiskFullTest,
    ::testing::Values(
        DiskFull{"NoRoom", [](uint64_t) -> uint64_t { return 0; }, "ckpt-2.safetensors"},
        DiskFull{"HalfTheCheckpoint", [](uint64_t bytes) { return bytes / 2; },
                 "ckpt-2.safetensors"},
        DiskFull{"AllButOneByte", [](uint64_t bytes) { return bytes - 1; }, "ckpt-2.safetensors"},
        DiskFull{"TheCheckpointButNotThePointer", [](uint64_t bytes) { return bytes + 4; },
                 "checkpoint"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(CheckpointDiskFullTest, WriteThrowsNamingTheFileAndLeavesNothing) {
  testing::TempDir dir;
  Checkpoint checkpoint(linear_model(1), nullptr);
  DiskFullEnv full(100);
  const std::string path = dir.file("c.safetensors");
  try {
    checkpoint.write(path, &full);
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + path + "'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(files_in(dir.path()).empty()) << ::testing::PrintToString(files_in(dir.path()));
}

TEST(SafetensorsEnvTest, ADiskFullSaveKeepsTheOldFileWhole) {
  testing::TempDir dir;
  const std::string path = dir.file("w.safetensors");
  save_safetensors(path, {{"w", torch::ones({10})}});
  DiskFullEnv full(64);
  try {
    save_safetensors(path, {{"w", torch::zeros({1000})}}, {}, &full);
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + path + "'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"w.safetensors"});
  auto file = load_safetensors(path);
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_TRUE(torch::equal(file.tensors[0].second, torch::ones({10})));
}

TEST(SafetensorsEnvTest, LoadReadsThroughTheEnv) {
  testing::TempDir dir;
  const std::string path = dir.file("w.safetensors");
  RecordingEnv env(dir.path());
  save_safetensors(path, {{"w", torch::arange(6)}}, {{"k", "v"}}, &env);
  const auto file = load_safetensors(path, &env);
  EXPECT_TRUE(torch::equal(file.tensors.at(0).second, torch::arange(6)));
  EXPECT_EQ(file.metadata.at("k"), "v");
  EXPECT_EQ(env.operations().back(), "new_random_access_file w.safetensors");
}

}  // namespace
}  // namespace dist
