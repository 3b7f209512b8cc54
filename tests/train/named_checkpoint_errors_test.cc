// Checkpoints of named objects (tf.train.Checkpoint(generator_g=..., ...)), what they refuse:
// bad names and optimizers without their model are refused by name when added; every mismatch
// between the objects and a file, and every damaged byte, is named when read and changes
// nothing. The round trips: named_checkpoint_test.cc.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cpu_replicas.h"
#include "dist/core/error.h"
#include "dist/train/checkpoint.h"
#include "dist/train/safetensors.h"
#include "test_util.h"
#include "train/gan_checkpoint_objects.h"

namespace dist {
namespace {

// Declarations, not a directive: in a unity batch another test's namesake (values_of)
// in this anonymous namespace would hide what a directive brings in.
using gan_checkpoint::everything;
using gan_checkpoint::expect_identical;
using gan_checkpoint::Gan;
using gan_checkpoint::generator;
using gan_checkpoint::MirroredPair;
using gan_checkpoint::values_of;

// ---- mistakes
// ------------------------------------------------------------------------------------

void expect_invalid(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an InvalidArgument";
  } catch (const InvalidArgument& e) {
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(NamedCheckpointTest, BadNamesAndOptimizersWithoutTheirModelAreRefusedByName) {
  Gan gan(1);
  Checkpoint ckpt;
  ckpt.add("generator_g", gan.generator_g);
  expect_invalid([&] { ckpt.add("generator_g", gan.generator_f); },
                 {"'generator_g'", "already added"});
  expect_invalid([&] { ckpt.add("generator/f", gan.generator_f); }, {"'generator/f'", "'/'"});
  expect_invalid([&] { ckpt.add("", gan.generator_f); }, {"empty"});
  expect_invalid([&] { ckpt.add("rng", gan.lambda); }, {"'rng'", "reserved"});
  expect_invalid([&] { ckpt.add("__metadata__", gan.lambda); }, {"'__metadata__'", "reserved"});
  expect_invalid([&] { ckpt.add("lambda", torch::Tensor()); }, {"'lambda'", "undefined"});
  // The optimizer of a model not added (yet).
  expect_invalid([&] { ckpt.add("generator_f_optimizer", gan.generator_f_optimizer.get()); },
                 {"'generator_f_optimizer'", "add its model first"});
  expect_invalid(
      [&] { ckpt.add("generator_f_optimizer", gan.generator_f_optimizer.get(), "generator_f"); },
      {"'generator_f'", "'generator_f_optimizer'", "add the model first"});
  expect_invalid(
      [&] { ckpt.add("generator_f_optimizer", gan.generator_f_optimizer.get(), "generator_g"); },
      {"'generator_f_optimizer'", "not in model 'generator_g'"});
  const auto two = testing::cpu_replicas(2);
  MirroredPair pair(two, 1);
  expect_invalid([&] { ckpt.add("mirrored_optimizer", pair.generator_g_optimizer); },
                 {"'mirrored_optimizer'", "add its model"});
  // A parameter group added after the optimizer was: refused when written.
  ckpt.add("generator_g_optimizer", gan.generator_g_optimizer.get());
  gan.generator_g_optimizer->add_param_group(
      torch::optim::OptimizerParamGroup(gan.generator_f->parameters()));
  testing::TempDir dir;
  expect_invalid([&] { ckpt.write(dir.file("c.safetensors")); },
                 {"'generator_g_optimizer'", "not in its model 'generator_g'"});
  // Nothing of the failed adds was kept.
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"generator_g", "generator_g_optimizer"}));
}

torch::Tensor random_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

// Reads `path` into `gan`'s checkpoint as `configure` changes it, expecting a DataError that
// names the file and every one of `parts`; nothing of the gan may have changed.
void expect_refused(Gan& gan, const std::string& path,
                    const std::function<void(Checkpoint&)>& configure,
                    const std::vector<std::string>& parts) {
  const auto before = everything(gan);
  const auto random = random_state();
  Checkpoint ckpt;
  configure(ckpt);
  try {
    ckpt.read(path);
    ADD_FAILURE() << "expected a DataError";
  } catch (const DataError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
  }
  expect_identical(everything(gan), before);
  EXPECT_TRUE(torch::equal(random_state(), random));
  EXPECT_EQ(ckpt.state.step, 0);
}

// An object added that the file lacks, and an object of the file not added.
void expect_missing_objects_refused(Gan& gan, const std::string& path) {
  auto extra = torch::ones({2});
  expect_refused(gan, path,
                 [&](Checkpoint& c) {
                   c = gan.checkpoint();
                   c.add("identity_weight", extra);
                 },
                 {"object 'identity_weight'", "not in the file"});
  // An object of the file not added.
  expect_refused(gan, path,
                 [&](Checkpoint& c) {
                   c.add("generator_g", gan.generator_g)
                       .add("generator_g_optimizer", gan.generator_g_optimizer.get())
                       .add("lambda", gan.lambda);
                 },
                 {"object 'discriminator_x'", "is in the file but was not added",
                  "skip(\"discriminator_x\")"});
}

// Tensors of another shape or dtype, objects of another kind, optimizers of another model or
// class.
void expect_mismatched_objects_refused(Gan& gan, const std::string& path) {
  // A parameter of another shape, in the last model added: the ones before it pass.
  Gan wide(5);
  wide.generator_f = generator(6, 5);
  wide.generator_f_optimizer = std::make_unique<torch::optim::Adam>(wide.generator_f->parameters());
  expect_refused(wide, path, [&](Checkpoint& c) { c = wide.checkpoint(); },
                 {"object 'generator_f'", "tensor 'generator_f/0.weight'", "[5, 2, 3, 3]"});
  // A tensor of another dtype or shape.
  expect_refused(gan, path,
                 [&](Checkpoint& c) {
                   c = gan.checkpoint_except({"lambda"});
                   c.add("lambda", torch::tensor(1.0, torch::kDouble));
                 },
                 {"object 'lambda'", "tensor 'lambda'", "Double", "Float"});
  // An object of another kind, and an optimizer paired with another model.
  expect_refused(gan, path, [&](Checkpoint& c) { c.add("lambda", gan.generator_g); },
                 {"object 'lambda' is a tensor in the file but a model here"});
  expect_refused(gan, path,
                 [&](Checkpoint& c) {
                   c = gan.checkpoint_except({"generator_g_optimizer", "generator_f_optimizer"});
                   c.add("generator_g_optimizer", gan.generator_f_optimizer.get())  // swapped
                       .add("generator_f_optimizer", gan.generator_g_optimizer.get());
                 },
                 {"object 'generator_g_optimizer'", "model 'generator_g' in the file",
                  "model 'generator_f' here"});
  // Another optimizer class.
  torch::optim::SGD sgd(gan.discriminator_y->parameters(), torch::optim::SGDOptions(0.1));
  expect_refused(gan, path,
                 [&](Checkpoint& c) {
                   c = gan.checkpoint_except({"discriminator_y_optimizer"});
                   c.add("discriminator_y_optimizer", &sgd);
                 },
                 {"object 'discriminator_y_optimizer'", "Adam state but the optimizer is SGD"});
}

// Skipped objects are left unread; the others are restored.
void expect_skipped_objects_left_unread(const Gan& saved, const std::string& path) {
  Gan part(6);
  Checkpoint partial;
  partial.add("generator_g", part.generator_g).add("lambda", part.lambda);
  for (const char* name :
       {"generator_f", "discriminator_x", "discriminator_y", "generator_g_optimizer",
        "generator_f_optimizer", "discriminator_x_optimizer", "discriminator_y_optimizer"})
    partial.skip(name);
  const auto untouched = values_of(*part.generator_f);
  partial.read(path);
  expect_identical(values_of(*part.generator_g), values_of(*saved.generator_g));
  expect_identical(values_of(*part.generator_f), untouched);
  EXPECT_EQ(part.lambda.item<double>(), 11.0);
  EXPECT_EQ(partial.state.step, 2);
}

TEST(NamedCheckpointTest, MismatchesAreNamedAndChangeNothing) {
  testing::TempDir dir;
  const std::string path = dir.file("gan.safetensors");
  Gan saved(1);
  saved.train(2);
  Checkpoint written = saved.checkpoint();
  written.state.step = 2;
  written.write(path);

  Gan gan(5);
  gan.train(1);  // with optimizer state, to see that it is left alone
  expect_missing_objects_refused(gan, path);
  expect_mismatched_objects_refused(gan, path);
  expect_skipped_objects_left_unread(saved, path);
}

// ---- damage ------------------------------------------------------------------------------------

// The byte range of tensor `name`'s data in a safetensors file.
std::pair<size_t, size_t> data_of(const std::string& bytes, const std::string& name) {
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i)
    length |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  auto header = nlohmann::json::parse(bytes.substr(8, length));
  const auto offsets = header.at(name).at("data_offsets");
  return {8 + length + offsets[0].get<size_t>(), 8 + length + offsets[1].get<size_t>()};
}

TEST(NamedCheckpointTest, AFlippedByteInAnyObjectIsReportedByTensorBeforeAnythingChanges) {
  testing::TempDir dir;
  const std::string path = dir.file("gan.safetensors");
  Gan saved(1);
  saved.train(2);
  saved.checkpoint().write(path);
  const std::string clean = testing::read_file(path);
  for (const std::string tensor :
       {"generator_f/1.running_var", "discriminator_y_optimizer/3.weight/exp_avg_sq",
        "discriminator_x_optimizer/0.bias/step", "lambda"}) {
    SCOPED_TRACE(tensor);
    std::string bytes = clean;
    const auto [begin, end] = data_of(bytes, tensor);
    ASSERT_LT(begin, end);
    bytes[(begin + end) / 2] ^= 0x04;
    testing::write_file(path, bytes);
    Gan gan(5);
    expect_refused(gan, path, [&](Checkpoint& c) { c = gan.checkpoint(); },
                   {"tensor '" + tensor + "'", "does not match its checksum"});
  }
  // The list of objects is under the header checksum.
  testing::write_file(path, clean);
  SafetensorsFile file = load_safetensors(path);
  file.metadata["object/lambda"] = "model";
  save_safetensors(path, file.tensors, file.metadata);
  Gan gan(5);
  expect_refused(gan, path, [&](Checkpoint& c) { c = gan.checkpoint(); },
                 {"header checksum does not match"});
}

}  // namespace
}  // namespace dist
