// Checkpoints written in pieces (sharding 'parameters', train/checkpoint_pieces.h): what the
// files hold, that a job without sharding reads them, and that a missing, foreign or
// incomplete piece is a named error. One worker here; several workers (pieces written by each,
// read by every other strategy and worker count) are StrategyConformanceTest's checkpoint
// lines and DistTrainShardingTest.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "dist/core/error.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/sharding.h"
#include "dist/train/checkpoint.h"
#include "dist/train/safetensors.h"
#include "test_envs.h"
#include "test_util.h"
#include "train/checkpoint_pieces.h"

namespace dist {
namespace {

// One worker of one replica, sharding 'parameters'.
MirroredOptions stage_three() {
  MirroredOptions options;
  options.devices = {"cpu:0"};
  options.threads_per_replica = 1;
  options.sharding = Sharding::kParameters;
  return options;
}

torch::nn::Sequential small_model() {
  return torch::nn::Sequential(torch::nn::Linear(8, 6), torch::nn::ReLU(), torch::nn::Linear(6, 4));
}

// Two Adam steps at stage 3 in one worker, written to `path`; returns the weights then.
std::vector<torch::Tensor> write_stage_three(const std::string& path, int64_t step = 2) {
  MirroredStrategy strategy(stage_three());
  torch::manual_seed(3);
  auto model = strategy.mirror(small_model());
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-2));
  for (int s = 0; s < 2; ++s)
    strategy.run(
        [&](const data::Element&) {
          model->forward(torch::ones({2, 8})).sum().backward();
          optimizer->apply_gradients();
        },
        data::Element{torch::zeros({2, 1})});
  Checkpoint checkpoint(model, optimizer.get());
  EXPECT_TRUE(checkpoint.written_in_pieces());
  checkpoint.state.step = step;
  checkpoint.write(path);
  model.variables().gather_values();
  std::vector<torch::Tensor> weights;
  for (const auto& p : model.primary()->parameters()) weights.push_back(p.detach().clone());
  return weights;
}

std::string read_error(const std::string& path) {
  auto module = small_model();
  try {
    Checkpoint(module.ptr(), nullptr).skip("optimizer").read(path);
  } catch (const DataError& e) {
    return e.what();
  }
  return "no error";
}

TEST(CheckpointPiecesTest, StageThreeWritesItsSharesInAPieceThatAPlainModuleReads) {
  testing::TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  const auto weights = write_stage_three(path);

  const SafetensorsFile main = load_safetensors(path);
  EXPECT_EQ(main.metadata.at("pieces"), "1");
  for (const auto& [name, t] : main.tensors)
    EXPECT_TRUE(name.rfind("model/", 0) != 0 && name.rfind("optimizer/", 0) != 0) << name;
  const SafetensorsFile piece = load_safetensors(path + ".piece-0-of-1");
  std::map<std::string, at::Tensor> held(piece.tensors.begin(), piece.tensors.end());
  ASSERT_EQ(held.count("model/0.weight"), 1u);
  EXPECT_EQ(held["model/0.weight"].sizes(), (std::vector<int64_t>{48}));  // 1-D: a range
  EXPECT_EQ(piece.metadata.at("shape/model/0.weight"), "6,8");
  EXPECT_EQ(held.count("optimizer/2.bias/exp_avg_sq"), 1u);
  EXPECT_EQ(held.at("optimizer/2.bias/step").item<int64_t>(), 2);

  auto module = small_model();
  torch::optim::Adam adam(module->parameters(), torch::optim::AdamOptions(1e-2));
  Checkpoint(module.ptr(), &adam).read(path);
  const auto read = module->parameters();
  ASSERT_EQ(read.size(), weights.size());
  for (size_t i = 0; i < read.size(); ++i) EXPECT_TRUE(torch::equal(read[i], weights[i])) << i;
  EXPECT_EQ(adam.state().size(), read.size());  // every parameter's slots
}

TEST(CheckpointPiecesTest, AMissingOrForeignPieceIsNamed) {
  testing::TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  write_stage_three(path, 2);
  write_stage_three(dir.file("other.safetensors"), 5);
  const std::string piece = path + ".piece-0-of-1";

  std::filesystem::rename(piece, dir.file("aside"));
  const std::string missing = read_error(path);
  EXPECT_NE(missing.find("piece '" + piece + "' is missing"), std::string::npos) << missing;

  std::filesystem::copy_file(dir.file("other.safetensors.piece-0-of-1"), piece);
  const std::string foreign = read_error(path);
  EXPECT_NE(foreign.find("it is piece 0 of 1 of the checkpoint of step 5 saved as "),
            std::string::npos)
      << foreign;
}

// A piece that cannot be written (a full disk) fails the save: the checkpoint's own file is not
// written, the pointer still names the previous checkpoint, and a later save completes.
TEST(CheckpointPiecesTest, APieceThatCannotBeWrittenLeavesThePreviousCheckpointLatest) {
  testing::TempDir dir;
  MirroredStrategy strategy(stage_three());
  auto model = strategy.mirror(small_model());
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  Checkpoint checkpoint(model, optimizer.get());
  CheckpointManager manager(dir.path(), 3);
  checkpoint.state.step = 1;
  const std::string previous = manager.save(checkpoint);

  testing::DiskFullEnv full(100);
  CheckpointManager on_full_disk(dir.path(), 3, &full);
  checkpoint.state.step = 2;
  try {
    on_full_disk.save(checkpoint);
    FAIL() << "a piece was written on a full disk";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("ckpt-2.safetensors.piece-0-of-1"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(manager.latest(), previous);
  EXPECT_FALSE(std::filesystem::exists(dir.file("ckpt-2.safetensors")));
  checkpoint.state.step = 3;
  EXPECT_EQ(manager.save(checkpoint), dir.file("ckpt-3.safetensors"));
  EXPECT_EQ(testing::files_in(dir.path()),
            (std::vector<std::string>{"checkpoint", "ckpt-1.safetensors",
                                      "ckpt-1.safetensors.piece-0-of-1", "ckpt-3.safetensors",
                                      "ckpt-3.safetensors.piece-0-of-1"}));
}

// Pieces that leave elements of a tensor out, or hold them twice, are refused.
TEST(CheckpointPiecesTest, PiecesThatDoNotCoverATensorExactlyOnceAreRefused) {
  testing::TempDir dir;
  const std::string path = dir.file("ckpt");
  const detail::PiecesOf of{2, 7, "11"};
  auto range = [](int64_t begin, int64_t length) {
    return detail::PieceTensor{"model/w", begin, {2, 4}, torch::arange(length).to(torch::kFloat)};
  };
  auto error = [&] {
    std::map<std::string, at::Tensor> tensors;
    try {
      detail::read_checkpoint_pieces(path, of, Env::Default(), tensors);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  detail::write_checkpoint_piece(path, of, 0, {range(0, 3)}, Env::Default());
  detail::write_checkpoint_piece(path, of, 1, {range(4, 4)}, Env::Default());
  EXPECT_NE(error().find("tensor 'model/w': its pieces leave a gap at element 3 of 8"),
            std::string::npos)
      << error();
  detail::write_checkpoint_piece(path, of, 1, {range(2, 6)}, Env::Default());
  EXPECT_NE(error().find("tensor 'model/w': its pieces overlap at element 2 of 8"),
            std::string::npos)
      << error();
  detail::write_checkpoint_piece(path, of, 1, {range(4, 5)}, Env::Default());
  EXPECT_NE(error().find("do not fit it"), std::string::npos) << error();
  detail::write_checkpoint_piece(path, of, 1, {range(3, 5)}, Env::Default());
  std::map<std::string, at::Tensor> tensors;
  detail::read_checkpoint_pieces(path, of, Env::Default(), tensors);
  EXPECT_TRUE(torch::equal(tensors.at("model/w").view(-1),
                           torch::tensor({0, 1, 2, 0, 1, 2, 3, 4}).to(torch::kFloat)));
}

// What the checkpoint holds is the parameters' current values, whatever happened to them since
// the last step: read back and written again before any step (the slots then whole in the
// optimizer), or changed in place after gather_values() (as set_weights does).
TEST(CheckpointPiecesTest, AWriteAfterARestoreOrAnInPlaceChangeHoldsTheCurrentValues) {
  testing::TempDir dir;
  const auto weights = write_stage_three(dir.file("first"));
  MirroredStrategy strategy(stage_three());
  auto model = strategy.mirror(small_model());
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-2));
  Checkpoint checkpoint(model, optimizer.get());
  checkpoint.read(dir.file("first"));
  checkpoint.write(dir.file("again"));
  auto plain = [&](const std::string& path) {
    auto module = small_model();
    torch::optim::Adam adam(module->parameters(), torch::optim::AdamOptions(1e-2));
    Checkpoint(module.ptr(), &adam).read(path);
    return std::make_pair(module->parameters(), adam.state().size());
  };
  auto [again, slots] = plain(dir.file("again"));
  EXPECT_EQ(slots, weights.size());
  for (size_t i = 0; i < again.size(); ++i) EXPECT_TRUE(torch::equal(again[i], weights[i])) << i;

  model.variables().gather_values();
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model.primary()->parameters()) p.fill_(7);
  }
  checkpoint.write(dir.file("changed"));
  for (const auto& p : plain(dir.file("changed")).first)
    EXPECT_TRUE(torch::equal(p, torch::full_like(p, 7)));
}

// A 0-dim parameter is a range of one element (its Adam step counter is held whole).
TEST(CheckpointPiecesTest, AScalarParameterIsWrittenAndReadBack) {
  struct ScaleImpl : torch::nn::Cloneable<ScaleImpl> {
    ScaleImpl() { reset(); }
    void reset() override { scale = register_parameter("scale", torch::ones({})); }
    torch::Tensor forward(const torch::Tensor& x) { return x * scale; }
    torch::Tensor scale;
  };
  testing::TempDir dir;
  MirroredStrategy strategy(stage_three());
  auto model = strategy.mirror(torch::nn::Sequential(torch::nn::Linear(2, 2), ScaleImpl()));
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(0.5));
  strategy.run(
      [&](const data::Element&) {
        model->forward(torch::ones({2, 2})).sum().backward();
        optimizer->apply_gradients();
      },
      data::Element{torch::zeros({2, 1})});
  Checkpoint(model, optimizer.get()).write(dir.file("ckpt"));
  auto module = torch::nn::Sequential(torch::nn::Linear(2, 2), ScaleImpl());
  torch::optim::Adam adam(module->parameters(), torch::optim::AdamOptions(0.5));
  Checkpoint(module.ptr(), &adam).read(dir.file("ckpt"));
  model.variables().gather_values();
  EXPECT_TRUE(torch::equal(module->parameters()[2], model.primary()->parameters()[2]));
  EXPECT_NE(module->parameters()[2].item<float>(), 1.0f);  // the step moved it
}

}  // namespace
}  // namespace dist
