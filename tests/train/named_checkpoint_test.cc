// Checkpoints of named objects (tf.train.Checkpoint(generator_g=..., ...)): a CycleGAN's four
// models, four optimizers and a tensor round trip bit for bit, across replica counts and into
// no strategy; files of Checkpoint(model, optimizer), old and new, read either way. Mismatches
// and damage: named_checkpoint_errors_test.cc.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "cpu_replicas.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/train/checkpoint.h"
#include "dist/train/safetensors.h"
#include "test_util.h"
#include "train/checkpoint_checksums.h"
#include "train/gan_checkpoint_objects.h"

namespace dist {
namespace {

// Declarations, not a directive: in a unity batch another test's namesake (values_of)
// in this anonymous namespace would hide what a directive brings in.
using gan_checkpoint::adam_state;
using gan_checkpoint::differs;
using gan_checkpoint::discriminator;
using gan_checkpoint::everything;
using gan_checkpoint::expect_identical;
using gan_checkpoint::Gan;
using gan_checkpoint::generator;
using gan_checkpoint::MirroredPair;
using gan_checkpoint::values_of;

TEST(NamedCheckpointTest, FourModelsFourAdamsAndATensorRoundTripAndContinueBitForBit) {
  testing::TempDir dir;
  Gan gan(1);
  gan.train(3);
  Checkpoint saved = gan.checkpoint();
  saved.state.step = 3;
  saved.write(dir.file("gan.safetensors"));
  const auto at_save = everything(gan);
  gan.train(2);
  const auto expected = everything(gan);

  Gan fresh(2);  // other initial values, learning rates and lambda; no optimizer state yet
  torch::manual_seed(99);  // another generator state, to be restored
  ASSERT_TRUE(differs(everything(fresh), at_save));
  const torch::Tensor lambda = fresh.lambda;  // restored in place: the same tensor
  Checkpoint restored = fresh.checkpoint();
  restored.read(dir.file("gan.safetensors"));
  EXPECT_EQ(restored.state.step, 3);
  expect_identical(everything(fresh), at_save);
  EXPECT_EQ(lambda.item<double>(), 11.0);
  fresh.train(2);
  expect_identical(everything(fresh), expected);

  // The file names each object's tensors after it, and lists the objects.
  auto file = load_safetensors(dir.file("gan.safetensors"));
  EXPECT_EQ(file.tensors.front().first, "generator_g/0.weight");
  EXPECT_EQ(file.metadata.at("object/generator_g"), "model");
  EXPECT_EQ(file.metadata.at("object/discriminator_y_optimizer"), "optimizer");
  EXPECT_EQ(file.metadata.at("object/discriminator_y_optimizer/class"), "Adam");
  EXPECT_EQ(file.metadata.at("object/discriminator_y_optimizer/model"), "discriminator_y");
  EXPECT_EQ(file.metadata.at("object/lambda"), "tensor");
  std::set<std::string> names;
  for (const auto& [name, t] : file.tensors) names.insert(name);
  EXPECT_EQ(names.count("discriminator_x_optimizer/3.bias/max_exp_avg_sq"), 1u);
  EXPECT_EQ(names.count("generator_f/1.running_mean"), 1u);
  EXPECT_EQ(names.count("lambda"), 1u);
  EXPECT_EQ(file.metadata.count("optimizer"), 0u);  // only Checkpoint(model, optimizer)'s
}

TEST(NamedCheckpointTest, ObjectsAreFoundWhicheverWayTheyAreAdded) {
  // Shared pointers, a model name given explicitly, the order of optimizers and models.
  testing::TempDir dir;
  Gan gan(1);
  gan.train(2);
  Checkpoint saved;
  saved.add("generator_g", gan.generator_g.ptr())
      .add("generator_g_optimizer", gan.generator_g_optimizer.get(), "generator_g")
      .add("discriminator_x",
           std::static_pointer_cast<torch::nn::Module>(gan.discriminator_x.ptr()))
      .add("discriminator_x_optimizer", gan.discriminator_x_optimizer.get());
  saved.write(dir.file("c.safetensors"));
  EXPECT_EQ(saved.names(),
            (std::vector<std::string>{"generator_g", "generator_g_optimizer", "discriminator_x",
                                      "discriminator_x_optimizer"}));
  Gan fresh(4);
  Checkpoint restored;
  restored.add("discriminator_x", fresh.discriminator_x)
      .add("generator_g", fresh.generator_g)
      .add("discriminator_x_optimizer", fresh.discriminator_x_optimizer.get())
      .add("generator_g_optimizer", fresh.generator_g_optimizer.get());
  restored.read(dir.file("c.safetensors"));
  expect_identical(values_of(*fresh.generator_g), values_of(*gan.generator_g));
  expect_identical(values_of(*fresh.discriminator_x), values_of(*gan.discriminator_x));
  expect_identical(adam_state(*fresh.generator_g_optimizer),
                   adam_state(*gan.generator_g_optimizer));
  expect_identical(adam_state(*fresh.discriminator_x_optimizer),
                   adam_state(*gan.discriminator_x_optimizer));
}

// ---- across strategies -------------------------------------------------------------------------

TEST(NamedCheckpointTest, WrittenWithTwoReplicasReadsIntoNoStrategyAndThreeReplicas) {
  testing::TempDir dir;
  const auto two = testing::cpu_replicas(2);
  MirroredPair saved(two, 1);
  saved.train(two, 3);
  saved.lambda.mul_(-1);
  saved.checkpoint().write(dir.file("two.safetensors"));
  const auto expected = everything(saved);

  // No strategy: plain modules and LibTorch optimizers under the same names.
  auto generator_g = generator(7);
  auto discriminator_x = discriminator(8);
  torch::optim::Adam generator_g_optimizer(generator_g->parameters(),
                                           torch::optim::AdamOptions(0.5));
  torch::optim::Adam discriminator_x_optimizer(discriminator_x->parameters(),
                                               torch::optim::AdamOptions(0.5));
  auto lambda = torch::zeros({3});
  Checkpoint plain;
  plain.add("generator_g", generator_g)
      .add("discriminator_x", discriminator_x)
      .add("generator_g_optimizer", &generator_g_optimizer)
      .add("discriminator_x_optimizer", &discriminator_x_optimizer)
      .add("lambda", lambda);
  plain.read(dir.file("two.safetensors"));
  std::vector<torch::Tensor> actual = values_of(*generator_g);
  for (auto& v : values_of(*discriminator_x)) actual.push_back(v);
  for (auto& v : adam_state(generator_g_optimizer)) actual.push_back(v);
  for (auto& v : adam_state(discriminator_x_optimizer)) actual.push_back(v);
  actual.push_back(lambda);
  expect_identical(actual, expected);

  // Three replicas: every replica's copy holds the values (buffers are per copy).
  const auto three = testing::cpu_replicas(3);
  MirroredPair restored(three, 5);
  restored.checkpoint().read(dir.file("two.safetensors"));
  expect_identical(everything(restored), expected);
  for (const auto& copy : restored.generator_g.replicas())
    expect_identical(values_of(*copy), values_of(*saved.generator_g.primary()));

  // Written again with three replicas, read with two: the same file contents.
  restored.checkpoint().write(dir.file("three.safetensors"));
  MirroredPair again(two, 9);
  again.checkpoint().read(dir.file("three.safetensors"));
  expect_identical(everything(again), expected);

  // Training continues bit for bit from the round trip through three replicas.
  saved.train(two, 2);
  again.train(two, 2);
  expect_identical(everything(again), everything(saved));
}

// ---- the files of Checkpoint(model, optimizer)
// ---------------------------------------------------

// Rewrites a checkpoint's metadata through `edit`, then seals it again as Checkpoint::write
// does, so only the edit differs.
void edit_metadata(const std::string& path,
                   const std::function<void(std::map<std::string, std::string>&)>& edit) {
  SafetensorsFile file = load_safetensors(path);
  edit(file.metadata);
  dist::detail::seal_checkpoint(file.tensors, file.metadata);
  save_safetensors(path, file.tensors, file.metadata);
}

// A file as Checkpoint(model, optimizer) wrote it before named objects: no "object/" entries.
void make_old_style(const std::string& path) {
  edit_metadata(path, [](std::map<std::string, std::string>& meta) {
    for (auto it = meta.begin(); it != meta.end();)
      it = it->first.rfind("object/", 0) == 0 ? meta.erase(it) : std::next(it);
  });
}

TEST(NamedCheckpointTest, TheFilesOfCheckpointModelOptimizerAreTheObjectsModelAndOptimizer) {
  testing::TempDir dir;
  auto model = generator(1);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.03));
  for (int i = 0; i < 2; ++i) {
    adam.zero_grad();
    model->forward(torch::randn({2, 2, 6, 6})).square().mean().backward();
    adam.step();
  }
  const auto values = values_of(*model);
  const auto slots = adam_state(adam);
  Checkpoint(model.ptr(), &adam).write(dir.file("old_api.safetensors"));
  std::filesystem::copy_file(dir.file("old_api.safetensors"), dir.file("old_format.safetensors"));
  make_old_style(dir.file("old_format.safetensors"));
  // Read by earlier versions: the entries they look for are still written.
  const auto meta = load_safetensors(dir.file("old_api.safetensors")).metadata;
  EXPECT_EQ(meta.at("optimizer"), "Adam");
  EXPECT_EQ(meta.at("optimizer.lr/0"), "0.029999999999999999");
  EXPECT_EQ(load_safetensors(dir.file("old_format.safetensors")).metadata.count("object/model"),
            0u);

  for (const char* name : {"old_api.safetensors", "old_format.safetensors"}) {
    SCOPED_TRACE(name);
    auto other = generator(2);
    torch::optim::Adam other_adam(other->parameters(), torch::optim::AdamOptions(0.5));
    Checkpoint named;
    named.add("model", other).add("optimizer", &other_adam);
    named.read(dir.file(name));
    expect_identical(values_of(*other), values);
    expect_identical(adam_state(other_adam), slots);
  }

  // And the other way: named "model" and "optimizer", read by Checkpoint(model, optimizer).
  Checkpoint named;
  named.add("model", model).add("optimizer", &adam);
  named.write(dir.file("named.safetensors"));
  auto other = generator(3);
  torch::optim::Adam other_adam(other->parameters(), torch::optim::AdamOptions(0.5));
  Checkpoint(other.ptr(), &other_adam).read(dir.file("named.safetensors"));
  expect_identical(values_of(*other), values);
  expect_identical(adam_state(other_adam), slots);

  // A model alone reads the model of a file with optimizer state, as it always has.
  auto alone = generator(4);
  Checkpoint(alone.ptr(), nullptr).read(dir.file("old_format.safetensors"));
  expect_identical(values_of(*alone), values);
}

}  // namespace
}  // namespace dist
