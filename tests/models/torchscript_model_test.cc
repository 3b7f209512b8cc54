// TorchScript modules made in Python as LibTorch modules (dist/models/torchscript_model.h): the
// names, values and outputs are Python's, the adapter shares the scripted module's tensors,
// clones deeply, switches modes, writes back for Python, refuses bad files by name, and trains
// under MirroredStrategy as on one device. The modules and what Python computed with them are
// written at build time by examples/python/make_torchscript_models.py --test-files (Debian's
// python3-torch) into DIST_TORCHSCRIPT_TEST_DIR (tests/CMakeLists.txt).
#include "dist/models/torchscript_model.h"

#include <gmock/gmock-matchers.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "dist/core/error.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/distribute/sharding.h"
#include "dist/models/reference_models.h"
#include "dist/train/safetensors.h"
#include "equivalence_data.h"
#include "models/torchscript_files.h"
#include "test_util.h"

namespace dist::models {
namespace {

using ::testing::HasSubstr;
using testing::message_of;
using testing::TempDir;

using testing::model_file;

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Raw little-endian float32, as the Python script writes them.
at::Tensor floats_of(const std::string& path, at::IntArrayRef shape) {
  std::string bytes = testing::read_file(path);
  at::Tensor values = torch::empty(shape, torch::kFloat);
  EXPECT_EQ(bytes.size(), values.nbytes()) << path;
  std::memcpy(values.data_ptr(), bytes.data(), std::min(bytes.size(), values.nbytes()));
  return values;
}

at::Tensor example_input(const std::string& model) {
  return floats_of(model_file(model + ".input.f32"), {4, 1, 28, 28});
}

template <class Items>
std::vector<std::string> keys_of(const Items& items) {
  std::vector<std::string> keys;
  for (const auto& item : items) keys.push_back(item.key());
  return keys;
}

double max_abs_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

const char* const kModels[] = {"cnn_scripted", "cnn_traced", "resnet18", "tutorial_cnn"};

TEST(TorchScriptModelTest, NamesAreThoseOfPythonsStateDict) {
  for (const std::string name : kModels) {
    auto model = load_torchscript(model_file(name + ".pt"));
    EXPECT_EQ(keys_of(model->named_parameters()), lines_of(model_file(name + ".parameters.txt")))
        << name;
    EXPECT_EQ(keys_of(model->named_buffers()), lines_of(model_file(name + ".buffers.txt"))) << name;
  }
  // BatchNorm's step counter is a buffer, int64 as in Python and in LibTorch's BatchNorm.
  auto resnet = load_torchscript(model_file("resnet18.pt"));
  EXPECT_EQ(resnet->named_buffers()["layer1.0.bn1.num_batches_tracked"].scalar_type(),
            torch::kLong);
  EXPECT_EQ(resnet->named_parameters().size(), 62u);
}

TEST(TorchScriptModelTest, ForwardEqualsPythons) {
  for (const std::string name : kModels) {
    auto model = load_torchscript(model_file(name + ".pt"));
    model->eval();
    torch::NoGradGuard no_grad;
    const at::Tensor expected = floats_of(model_file(name + ".output.f32"), {4, 10});
    EXPECT_LT(max_abs_difference(model->forward(example_input(name)), expected), 1e-5) << name;
  }
  // The traced module is the scripted one's weights and graph.
  auto scripted = load_torchscript(model_file("cnn_scripted.pt"));
  auto traced = load_torchscript(model_file("cnn_traced.pt"));
  EXPECT_TRUE(torch::equal(scripted->forward(example_input("cnn_scripted")),
                           traced->forward(example_input("cnn_scripted"))));
}

TEST(TorchScriptModelTest, SharesTheScriptedModulesTensors) {
  auto model = load_torchscript(model_file("resnet18.pt"));
  std::vector<at::Tensor> parameters = model->parameters();
  size_t i = 0;
  for (const auto& p : model->script().parameters())
    EXPECT_EQ(p.unsafeGetTensorImpl(), parameters.at(i++).unsafeGetTensorImpl());
  std::vector<at::Tensor> buffers = model->buffers();
  i = 0;
  for (const auto& b : model->script().buffers())
    EXPECT_EQ(b.unsafeGetTensorImpl(), buffers.at(i++).unsafeGetTensorImpl());
  for (const auto& p : parameters) EXPECT_TRUE(p.requires_grad());
}

TEST(TorchScriptModelTest, CloneIsAnIndependentDeepCopy) {
  auto model = load_torchscript(model_file("resnet18.pt"));
  torch::manual_seed(3);
  auto copy = std::dynamic_pointer_cast<TorchScriptModuleImpl>(model->clone());
  const at::Tensor drawn = torch::rand({4});
  torch::manual_seed(3);
  EXPECT_TRUE(torch::equal(drawn, torch::rand({4}))) << "clone drew random numbers";
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(keys_of(copy->named_parameters()), keys_of(model->named_parameters()));
  EXPECT_EQ(keys_of(copy->named_buffers()), keys_of(model->named_buffers()));
  const auto originals = model->named_parameters();
  for (const auto& p : copy->named_parameters()) {
    const at::Tensor& original = originals[p.key()];
    EXPECT_TRUE(torch::equal(p.value(), original)) << p.key();
    EXPECT_NE(p.value().data_ptr(), original.data_ptr()) << p.key() << " is shared";
    EXPECT_TRUE(p.value().is_leaf() && p.value().requires_grad()) << p.key();
  }
  for (const auto& b : copy->named_buffers())
    EXPECT_NE(b.value().data_ptr(), model->named_buffers()[b.key()].data_ptr()) << b.key();
  // The copy's scripted module holds the copy's tensors.
  EXPECT_EQ((*copy->script().parameters().begin()).unsafeGetTensorImpl(),
            copy->parameters().front().unsafeGetTensorImpl());
  // Changing the original changes nothing in the copy.
  model->eval();
  copy->eval();
  const at::Tensor x = example_input("resnet18");
  torch::NoGradGuard no_grad;
  const at::Tensor before = copy->forward(x);
  for (auto& p : model->parameters()) p.add_(1.0);
  EXPECT_TRUE(torch::equal(copy->forward(x), before));
  EXPECT_FALSE(torch::equal(model->forward(x), before));
}

// Sharding packs parameters as views of one flat buffer; a copy must still get each its own.
TEST(TorchScriptModelTest, CloneCopiesParametersThatAreViewsOfOneBuffer) {
  auto model = load_torchscript(model_file("cnn_scripted.pt"));
  std::vector<at::Tensor> parameters = model->parameters();
  std::vector<at::Tensor> values;
  int64_t total = 0;
  for (const auto& p : parameters) {
    values.push_back(p.detach().clone());
    total += p.numel();
  }
  at::Tensor flat = torch::empty({total});
  int64_t offset = 0;
  for (size_t i = 0; i < parameters.size(); ++i) {
    at::Tensor view = flat.narrow(0, offset, values[i].numel()).view(values[i].sizes());
    view.copy_(values[i]);
    parameters[i].set_data(view);
    offset += values[i].numel();
  }
  auto copy = model->clone();
  std::vector<at::Tensor> copied = copy->parameters();
  ASSERT_EQ(copied.size(), values.size());
  for (size_t i = 0; i < copied.size(); ++i) {
    EXPECT_TRUE(torch::equal(copied[i], values[i])) << i;
    EXPECT_NE(copied[i].storage().unsafeGetStorageImpl(), flat.storage().unsafeGetStorageImpl());
  }
  const at::Tensor x = example_input("cnn_scripted");
  EXPECT_TRUE(torch::equal(copy->as<TorchScriptModuleImpl>()->forward(x), model->forward(x)));
}

TEST(TorchScriptModelTest, AnSgdStepChangesWhatTheScriptedForwardComputes) {
  auto model = load_torchscript(model_file("cnn_scripted.pt"));
  const at::Tensor x = example_input("cnn_scripted");
  torch::jit::Module script = model->script();
  const at::Tensor before = script.forward({x}).toTensor().detach();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  model->forward(x).pow(2).sum().backward();
  for (const auto& p : model->named_parameters())
    EXPECT_TRUE(p.value().grad().defined() && p.value().grad().abs().sum().item<double>() > 0)
        << p.key() << " got no gradient";
  sgd.step();
  const at::Tensor after = script.forward({x}).toTensor().detach();
  EXPECT_GT(max_abs_difference(after, before), 1e-3);
  EXPECT_TRUE(torch::equal(after, model->forward(x).detach()));
}

TEST(TorchScriptModelTest, TrainAndEvalReachBatchNorm) {
  auto model = load_torchscript(model_file("resnet18.pt"));
  const at::Tensor x = example_input("resnet18");
  torch::NoGradGuard no_grad;
  at::Tensor running_mean = model->named_buffers()["bn1.running_mean"];
  at::Tensor steps = model->named_buffers()["bn1.num_batches_tracked"];
  model->eval();
  EXPECT_FALSE(model->script().attr("bn1").toModule().is_training());
  const at::Tensor evaluated = model->forward(x);
  EXPECT_TRUE(torch::equal(running_mean, torch::zeros_like(running_mean)));
  EXPECT_EQ(steps.item<int64_t>(), 0);
  model->train();
  EXPECT_TRUE(model->script().attr("layer4").toModule().attr("1").toModule().is_training());
  const at::Tensor trained = model->forward(x);
  EXPECT_GT(running_mean.abs().sum().item<double>(), 0) << "batch norm did not update its mean";
  EXPECT_EQ(steps.item<int64_t>(), 1);
  EXPECT_GT(max_abs_difference(trained, evaluated), 1e-4);  // batch statistics, not running ones
  model->eval();
  EXPECT_TRUE(torch::equal(model->forward(x), model->forward(x)));
  EXPECT_EQ(steps.item<int64_t>(), 1);
}

TEST(TorchScriptModelTest, SavedModuleLoadsWithItsTrainedValues) {
  TempDir dir;
  auto model = load_torchscript(model_file("resnet18.pt"));
  const at::Tensor x = example_input("resnet18");
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05));
  model->forward(x).logsumexp(1).sum().backward();  // train mode: moves the statistics too
  sgd.step();
  model->eval();
  save_torchscript(*model, dir.file("trained.pt"));
  torch::jit::Module loaded = torch::jit::load(dir.file("trained.pt"));
  EXPECT_FALSE(loaded.is_training());
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(loaded.forward({x}).toTensor(), model->forward(x)));
  auto expected = model->named_buffers();
  for (const auto& b : loaded.named_buffers())
    EXPECT_TRUE(torch::equal(b.value, expected[b.name])) << b.name;
  auto again = load_torchscript(dir.file("trained.pt"));
  EXPECT_TRUE(torch::equal(again->forward(x), model->forward(x)));
  EXPECT_EQ(testing::files_in(dir.path()), std::vector<std::string>{"trained.pt"});
}

TEST(TorchScriptModelTest, SafetensorsWeightsCarryPythonsNames) {
  TempDir dir;
  auto model = load_torchscript(model_file("resnet18.pt"));
  save_torchscript_weights(*model, dir.file("weights.safetensors"));
  SafetensorsFile file = load_safetensors(dir.file("weights.safetensors"));
  std::vector<std::string> expected = lines_of(model_file("resnet18.parameters.txt"));
  for (const auto& name : lines_of(model_file("resnet18.buffers.txt"))) expected.push_back(name);
  std::vector<std::string> names;
  auto parameters = model->named_parameters();
  auto buffers = model->named_buffers();
  for (const auto& [name, tensor] : file.tensors) {
    names.push_back(name);
    const at::Tensor* own = parameters.find(name);
    if (own == nullptr) own = buffers.find(name);
    ASSERT_NE(own, nullptr) << name;
    EXPECT_TRUE(torch::equal(tensor, *own)) << name;
  }
  EXPECT_EQ(names, expected);
}

TEST(TorchScriptModelTest, TheTutorialCnnTwinComputesTheCppModelsFunction) {
  torch::manual_seed(7);
  torch::nn::Sequential cpp = make_tutorial_cnn();
  auto twin = load_torchscript(model_file("tutorial_cnn.pt"));
  EXPECT_EQ(keys_of(twin->named_parameters()), keys_of(cpp->named_parameters()));
  torch::NoGradGuard no_grad;
  auto weights = cpp->named_parameters();
  for (auto& p : twin->named_parameters()) p.value().copy_(weights[p.key()]);
  const at::Tensor x = example_input("tutorial_cnn");
  const at::Tensor expected = cpp->forward(x);
  EXPECT_LT(max_abs_difference(twin->forward(x), expected),
            1e-6 * std::max(1.0, expected.abs().max().item<double>()));
}

// Given the C++ model's initial weights, the twin trains to the C++ model's weights: 20 SGD(0.1)
// steps over the equivalence data (tests/equivalence_data.h) on one device.
TEST(TorchScriptModelTest, TheTutorialCnnTwinTrainsToTheCppModelsWeights) {
  OneDeviceStrategy strategy;
  torch::manual_seed(7);
  auto cpp = strategy.mirror(make_tutorial_cnn());
  torch::nn::Sequential holder;
  holder->push_back("twin", load_torchscript(model_file("tutorial_cnn.pt")));
  {
    torch::NoGradGuard no_grad;
    auto weights = cpp.primary()->named_parameters();
    for (auto& p : holder->named_parameters()) p.value().copy_(weights[p.key().substr(5)]);
  }
  auto twin = strategy.mirror(holder);
  auto sgd = [&](auto& model) {
    return strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  };
  std::vector<at::Tensor> initial;
  for (const auto& p : cpp.primary()->parameters()) initial.push_back(p.detach().clone());
  auto cpp_optimizer = sgd(cpp);
  auto twin_optimizer = sgd(twin);
  std::vector<at::Tensor> expected, actual;
  for (const auto& [name, value] : testing::train_one_pass(strategy, cpp, *cpp_optimizer))
    expected.push_back(value);
  for (const auto& [name, value] : testing::train_one_pass(strategy, twin, *twin_optimizer))
    actual.push_back(value);
  const double difference = testing::max_relative_difference(actual, expected);
  std::printf("twin against the C++ model after 20 steps: max relative difference %.3g\n",
              difference);
  EXPECT_LT(difference, 1e-6);
  EXPECT_GT(testing::max_relative_difference(expected, initial), 1e-3) << "nothing trained";
}

// ---- bad files: each refused before anything runs, naming the file ----------------------

TEST(TorchScriptModelTest, FilesThatAreNotTorchScriptAreRefusedByWhatTheyAre) {
  TempDir dir;
  const std::string good = testing::read_file(model_file("cnn_scripted.pt"));
  testing::write_file(dir.file("notes.pt"), "a model, honestly\n");
  testing::write_file(dir.file("empty.pt"), "");
  testing::write_file(dir.file("half.pt"), good.substr(0, good.size() / 2));
  testing::write_file(dir.file("short.pt"), good.substr(0, good.size() - 10));
  save_safetensors(dir.file("weights.safetensors"), {{"w", torch::ones({2})}});
  const std::pair<std::string, std::string> cases[] = {
      {dir.file("missing.pt"), "does not exist"},
      {dir.path(), "not a regular file"},
      {dir.file("notes.pt"), "is a text file"},
      {dir.file("empty.pt"), "is empty"},
      {dir.file("half.pt"), "is truncated"},
      {dir.file("short.pt"), "is truncated"},
      {dir.file("weights.safetensors"), "is a safetensors file"},
      {model_file("state_dict.pt"), "torch.save()"},
      {model_file("newer_version.pt"), "written by a newer PyTorch: its file format version 99"},
      {model_file("newer_operator.pt"),
       "(Unknown builtin op: aten::flattex.): it was probably "
       "written by a newer PyTorch"},
      {model_file("damaged.pt"), "cannot be loaded ("},
  };
  for (const auto& [path, what] : cases) {
    const std::string message = message_of<DataError>([&] { load_torchscript(path); });
    std::printf("%s\n", message.c_str());
    EXPECT_THAT(message, HasSubstr("'" + path + "'"));
    EXPECT_THAT(message, HasSubstr(what));
  }
}

TEST(TorchScriptModelTest, ModulesThatCannotTrainAreRefusedByName) {
  const std::pair<std::string, std::string> cases[] = {
      {"no_forward.pt", "has no forward method"},
      {"no_parameters.pt", "has no parameters"},
      {"frozen_weights.pt", "no parameter that requires a gradient"},
  };
  for (const auto& [name, what] : cases) {
    const std::string message =
        message_of<InvalidArgument>([&] { load_torchscript(model_file(name)); });
    std::printf("%s\n", message.c_str());
    EXPECT_THAT(message, HasSubstr("'" + model_file(name) + "'"));
    EXPECT_THAT(message, HasSubstr(what));
  }
}

TEST(TorchScriptModelTest, TheForwardCheckSaysWhatWasExpectedAndWhatCameBack) {
  const at::Tensor batch = example_input("cnn_scripted");
  auto good = load_torchscript(model_file("cnn_scripted.pt"));
  EXPECT_EQ(check_classifier_forward(*good, batch, 10).sizes(), (std::vector<int64_t>{4, 10}));
  EXPECT_TRUE(good->is_training()) << "the check left the module in evaluation mode";
  const std::string expected =
      "expected float logits of shape [4, 10] from a float batch of "
      "shape [4, 1, 28, 28]; it ";
  EXPECT_THAT(message_of<InvalidArgument>([&] { check_classifier_forward(*good, batch, 5); }),
              HasSubstr("10 classes instead of 5"));
  const std::pair<std::string, std::string> cases[] = {
      {"forward_tuple.pt", "returned a tuple of 2 (Tensor, Tensor)"},
      {"forward_list.pt", "returned a list of 1 (Tensor)"},
      {"forward_rank3.pt", "rank 3 instead of 2"},
      {"forward_one_row.pt", "1 rows for 4 images"},
      {"forward_long.pt", "dtype Long"},
      {"forward_raises.pt", "raised: builtins.ValueError: this model wants 3 channels"},
  };
  for (const auto& [name, what] : cases) {
    auto model = load_torchscript(model_file(name));
    const std::string message =
        message_of<InvalidArgument>([&] { check_classifier_forward(*model, batch, 10); });
    std::printf("%s\n", message.c_str());
    EXPECT_THAT(message, HasSubstr("'" + model_file(name) + "'"));
    EXPECT_THAT(message, HasSubstr(expected));
    EXPECT_THAT(message, HasSubstr(what));
  }
  // Training's forward refuses what is not one tensor too.
  auto tuple = load_torchscript(model_file("forward_tuple.pt"));
  EXPECT_THAT(message_of<InvalidArgument>([&] { tuple->forward(batch); }),
              HasSubstr("returned a tuple of 2"));
  // The check moves no batch-norm statistic.
  auto resnet = load_torchscript(model_file("resnet18.pt"));
  check_classifier_forward(*resnet, example_input("resnet18"), 10);
  EXPECT_EQ(resnet->named_buffers()["bn1.num_batches_tracked"].item<int64_t>(), 0);
}

// ---- under the strategies ---------------------------------------------------------------

MirroredOptions replicas(int count, Sharding sharding = Sharding::kNone) {
  MirroredOptions options;
  for (int r = 0; r < count; ++r) options.devices.push_back("cpu:" + std::to_string(r));
  options.threads_per_replica = 1;
  options.sharding = sharding;
  return options;
}

// 20 SGD(0.1) steps of the scripted CNN over the equivalence data (tests/equivalence_data.h).
std::vector<at::Tensor> train_scripted_cnn(const Strategy& strategy) {
  torch::nn::Sequential net;
  net->push_back("cnn", load_torchscript(model_file("cnn_scripted.pt")));
  auto model = strategy.mirror(net);
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  std::vector<at::Tensor> weights;
  for (const auto& [name, value] : testing::train_one_pass(strategy, model, *optimizer))
    weights.push_back(value);
  // The primary's scripted module computed with the trained values.
  std::vector<at::Tensor> own = model.primary()->parameters();
  for (size_t i = 0; i < own.size(); ++i) EXPECT_TRUE(torch::equal(own[i], weights[i]));
  return weights;
}

TEST(TorchScriptModelTest, MirroredTwoReplicasEqualOneDevice) {
  const auto expected = train_scripted_cnn(OneDeviceStrategy());
  const auto actual = train_scripted_cnn(MirroredStrategy(replicas(2)));
  const double difference = testing::max_relative_difference(actual, expected);
  EXPECT_LT(difference, 1e-5);
  std::printf("max relative difference: %.3g\n", difference);
  std::vector<at::Tensor> initial = load_torchscript(model_file("cnn_scripted.pt"))->parameters();
  EXPECT_GT(testing::max_relative_difference(expected, initial), 1e-3) << "nothing trained";
}

// Stage 3 gathers each layer before it computes; a scripted graph cannot say when, so the
// module alone is refused by name, and inside a Sequential it is one layer, gathered whole.
TEST(TorchScriptModelTest, ShardingParametersRefusesTheModuleAloneAndGathersItWhole) {
  MirroredStrategy strategy(replicas(1, Sharding::kParameters));
  EXPECT_THAT(message_of<InvalidArgument>(
                  [&] { strategy.mirror(load_torchscript(model_file("cnn_scripted.pt"))); }),
              HasSubstr("is neither"));
  const auto expected = train_scripted_cnn(OneDeviceStrategy());
  const auto sharded = train_scripted_cnn(MirroredStrategy(replicas(1, Sharding::kParameters)));
  EXPECT_LT(testing::max_relative_difference(sharded, expected), 1e-5);
}

}  // namespace
}  // namespace dist::models
