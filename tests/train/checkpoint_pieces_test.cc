// Checkpoints written in pieces (sharding 'parameters', train/checkpoint_pieces.h): what the
// files hold, that a job without sharding reads them, and that a missing, foreign or
// incomplete piece is a named error. One worker here; several workers (pieces written by each,
// read by every other strategy and worker count) are StrategyCheckpointMatrixTest and
// DistTrainShardingTest.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "dist/core/error.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/sharding.h"
#include "dist/train/checkpoint.h"
#include "dist/train/safetensors.h"
#include "distribute/step/optimizer_slots.h"
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

// small_model() with Adam at stage 3 in one worker.
struct StageThreeAdam {
  void step() {
    strategy.run(
        [&](const data::Element&) {
          model->forward(torch::ones({2, 8})).sum().backward();
          optimizer->apply_gradients();
        },
        data::Element{torch::zeros({2, 1})});
  }
  MirroredStrategy strategy{stage_three()};
  // Seeded first: every job starts from the same weights.
  Mirrored<torch::nn::Sequential> model = strategy.mirror((torch::manual_seed(3), small_model()));
  std::shared_ptr<MirroredOptimizer> optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-2));
};

// Two Adam steps at stage 3 in one worker, written to `path`; returns the weights then.
std::vector<torch::Tensor> write_stage_three(const std::string& path, int64_t step = 2) {
  StageThreeAdam job;
  job.step();
  job.step();
  auto& model = job.model;
  Checkpoint checkpoint(model, job.optimizer.get());
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

// Elements [begin, begin + length) of the 2 x 4 tensor 'model/w', holding 0, 1, ... length - 1.
detail::PieceTensor w_piece(int64_t begin, int64_t length) {
  return detail::PieceTensor{"model/w", begin, {2, 4}, torch::arange(length).to(torch::kFloat)};
}

// Pieces at `path` that hold 'model/w' as [0, 1, 2] and [0, 1, 2, 3, 4]: a reader that keeps
// part of it reads just that part, and still finds a gap outside it.
void expect_a_reader_keeps_only_its_range(const std::string& path, const detail::PiecesOf& of) {
  // A reader that keeps elements [2, 6) reads just those, from both pieces, and the shape.
  detail::CheckedTensors kept;
  detail::read_checkpoint_pieces(
      path, of, Env::Default(),
      [](const std::string& name) -> std::optional<detail::ElementRange> {
        if (name == "model/w") return detail::ElementRange{2, 4};
        return std::nullopt;
      },
      kept);
  EXPECT_TRUE(
      torch::equal(kept.tensors.at("model/w"), torch::tensor({2, 0, 1, 2}).to(torch::kFloat)));
  EXPECT_EQ(kept.whole_shapes.at("model/w"), (std::vector<int64_t>{2, 4}));
  // Still every element once: a gap outside the kept range is found all the same.
  detail::write_checkpoint_piece(path, of, 1, {w_piece(4, 4)}, Env::Default());
  detail::CheckedTensors fresh;
  try {
    detail::read_checkpoint_pieces(
        path, of, Env::Default(),
        [](const std::string&) {
          return detail::ElementRange{0, 2};
        },
        fresh);
    FAIL() << "a gap was read";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("leave a gap at element 3"), std::string::npos)
        << e.what();
  }
}

// Pieces that leave elements of a tensor out, or hold them twice, are refused.
TEST(CheckpointPiecesTest, PiecesThatDoNotCoverATensorExactlyOnceAreRefused) {
  testing::TempDir dir;
  const std::string path = dir.file("ckpt");
  const detail::PiecesOf of{2, 7, "11"};
  auto error = [&] {
    detail::CheckedTensors tensors;
    try {
      detail::read_checkpoint_pieces(path, of, Env::Default(), nullptr, tensors);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  detail::write_checkpoint_piece(path, of, 0, {w_piece(0, 3)}, Env::Default());
  detail::write_checkpoint_piece(path, of, 1, {w_piece(4, 4)}, Env::Default());
  EXPECT_NE(error().find("tensor 'model/w': its pieces leave a gap at element 3 of 8"),
            std::string::npos)
      << error();
  detail::write_checkpoint_piece(path, of, 1, {w_piece(2, 6)}, Env::Default());
  EXPECT_NE(error().find("tensor 'model/w': its pieces overlap at element 2 of 8"),
            std::string::npos)
      << error();
  detail::write_checkpoint_piece(path, of, 1, {w_piece(4, 5)}, Env::Default());
  EXPECT_NE(error().find("do not fit it"), std::string::npos) << error();
  detail::write_checkpoint_piece(path, of, 1, {w_piece(3, 5)}, Env::Default());
  detail::CheckedTensors tensors;
  detail::read_checkpoint_pieces(path, of, Env::Default(), nullptr, tensors);
  EXPECT_TRUE(torch::equal(tensors.tensors.at("model/w").view(-1),
                           torch::tensor({0, 1, 2, 0, 1, 2, 3, 4}).to(torch::kFloat)));
  EXPECT_TRUE(tensors.whole_shapes.empty());
  expect_a_reader_keeps_only_its_range(path, of);
}

// A parameter smaller than the worker count leaves some workers an empty share: an empty
// tensor in their piece, at the offset of the tensor after it, which a reader orders by name.
TEST(CheckpointPiecesTest, EmptySharesBesideOthersReadBack) {
  testing::TempDir dir;
  const std::string path = dir.file("ckpt");
  const detail::PiecesOf of{2, 3, "9"};
  auto piece = [](const std::string& name, int64_t begin, std::vector<int64_t> shape,
                  std::vector<float> values) {
    return detail::PieceTensor{name, begin, std::move(shape), torch::tensor(values)};
  };
  detail::write_checkpoint_piece(
      path, of, 0, {piece("net/z", 0, {}, {5}), piece("adam/z", 0, {}, {6})}, Env::Default());
  // Names out of order, the empty ones first: as a worker writes its shares.
  detail::write_checkpoint_piece(
      path, of, 1,
      {detail::PieceTensor{"net/z", 1, {}, torch::empty({0})},
       detail::PieceTensor{"adam/z", 1, {}, torch::empty({0})}, piece("net/a", 0, {2}, {1, 2})},
      Env::Default());
  detail::CheckedTensors tensors;
  detail::read_checkpoint_pieces(path, of, Env::Default(), nullptr, tensors);
  EXPECT_EQ(tensors.tensors.at("net/z").item<float>(), 5);
  EXPECT_EQ(tensors.tensors.at("adam/z").item<float>(), 6);
  EXPECT_TRUE(torch::equal(tensors.tensors.at("net/a"), torch::tensor({1.0f, 2.0f})));
}

// What the checkpoint holds is the parameters' current values, whatever happened to them since
// the last step: read back and written again before any step (the slots then whole in the
// optimizer), or changed in place after gather_values() (as set_weights does).
TEST(CheckpointPiecesTest, AWriteAfterARestoreOrAnInPlaceChangeHoldsTheCurrentValues) {
  testing::TempDir dir;
  const auto weights = write_stage_three(dir.file("first"));
  StageThreeAdam job;
  auto& model = job.model;
  Checkpoint checkpoint(model, job.optimizer.get());
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

// A stage-3 reader takes only its shares, here of a checkpoint written whole by a plain module:
// its step then equals the plain module's, its slots wait for the chunk optimizers of the first
// step (a checkpoint written before it holds them; gathering them then is refused by name), and
// a slot of another shape than its parameter's is named.
TEST(CheckpointPiecesTest, AStageThreeReaderTakesItsSharesOfACheckpointWrittenWhole) {
  testing::TempDir dir;
  torch::manual_seed(5);
  auto module = small_model();
  torch::optim::Adam adam(module->parameters(), torch::optim::AdamOptions(1e-2));
  auto plain_step = [&] {
    adam.zero_grad();
    module->forward(torch::ones({2, 8})).sum().backward();
    adam.step();
  };
  plain_step();
  Checkpoint(module.ptr(), &adam).write(dir.file("whole"));

  StageThreeAdam job;
  Checkpoint checkpoint(job.model, job.optimizer.get());
  checkpoint.read(dir.file("whole"));
  EXPECT_TRUE(job.optimizer->optimizer().state().empty());  // the shares wait for the step
  EXPECT_THROW(job.model.variables().gather_slots(job.optimizer->optimizer()), InvalidArgument);
  checkpoint.write(dir.file("before_step"));
  auto module_again = small_model();
  torch::optim::Adam adam_again(module_again->parameters(), torch::optim::AdamOptions(1e-2));
  Checkpoint(module_again.ptr(), &adam_again).read(dir.file("before_step"));
  ASSERT_EQ(adam_again.state().size(), module->parameters().size());
  for (size_t i = 0; i < module->parameters().size(); ++i) {
    auto slots = [](torch::optim::Adam& optimizer, const torch::Tensor& p) {
      return static_cast<torch::optim::AdamParamState&>(
          *optimizer.state().at(detail::state_key_of(p)));
    };
    const auto& expected = slots(adam, module->parameters()[i]);
    const auto& written = slots(adam_again, module_again->parameters()[i]);
    EXPECT_TRUE(torch::equal(written.exp_avg(), expected.exp_avg())) << i;
    EXPECT_TRUE(torch::equal(written.exp_avg_sq(), expected.exp_avg_sq())) << i;
    EXPECT_EQ(written.step(), expected.step()) << i;
  }

  plain_step();
  job.step();
  job.model.variables().gather_values();
  const auto expected = module->parameters(), actual = job.model.primary()->parameters();
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_TRUE(torch::allclose(actual[i], expected[i], 1e-6, 1e-7)) << i;

  auto& state = adam.state().at(detail::state_key_of(module->parameters()[0]));
  static_cast<torch::optim::AdamParamState&>(*state).exp_avg(torch::zeros({48}));
  Checkpoint(module.ptr(), &adam).write(dir.file("wrong"));
  try {
    checkpoint.read(dir.file("wrong"));
    FAIL() << "a slot of another shape was read";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "tensor 'optimizer/0.weight/exp_avg' is [48] but its parameter is [6, 8]"),
              std::string::npos)
        << e.what();
  }
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
