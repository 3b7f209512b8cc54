// models::TorchScriptLayer: a scripted module as one Keras layer (its output shape found by one
// forward, its weights under the layer's name, its forward the module's), refusing examples of
// another shape by name. fit under every strategy goes through dist-train's tests
// (tests/tools/dist_train_torchscript_test.cc, --loop fit).
#include "dist/models/torchscript_layer.h"

#include <gmock/gmock-matchers.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "dist/core/error.h"
#include "dist/keras/model.h"
#include "models/torchscript_files.h"

namespace dist::models {
namespace {

using testing::model_file;

TEST(TorchScriptLayerTest, AKerasModelOfTheLayerComputesTheModulesForwardUnderItsNames) {
  auto module = load_torchscript(model_file("cnn_scripted.pt"));
  module->train();
  keras::KerasTensor input = keras::Input({1, 28, 28});
  keras::KerasTensor output = TorchScriptLayer(module, {1, 28, 28})(input);
  EXPECT_EQ(output.shape(), (keras::Shape{10}));
  EXPECT_TRUE(module->is_training()) << "the shape's forward put the mode back";
  keras::Model model(input, output);
  const auto weights = model.weights();
  ASSERT_EQ(weights.size(), module->named_parameters().size() + module->named_buffers().size());
  for (const auto& [name, tensor] : weights) {
    ASSERT_EQ(name.rfind("torchscript.", 0), 0u) << name;
    const std::string own = name.substr(std::string("torchscript.").size());
    const at::Tensor* original = module->named_parameters().find(own);
    if (original == nullptr) original = module->named_buffers().find(own);
    ASSERT_NE(original, nullptr) << name;
    EXPECT_TRUE(torch::equal(tensor, *original)) << name;
    EXPECT_NE(tensor.data_ptr(), original->data_ptr()) << name << ": the model has its own copy";
  }
  torch::manual_seed(3);
  const at::Tensor x = torch::rand({4, 1, 28, 28});
  module->eval();
  torch::NoGradGuard no_gradients;
  EXPECT_TRUE(torch::allclose(model(x), module->forward(x), 0, 0));
}

TEST(TorchScriptLayerTest, ExamplesOfAnotherShapeAreRefusedNamingTheLayer) {
  auto module = load_torchscript(model_file("cnn_scripted.pt"));
  TorchScriptLayer layer(module, {1, 28, 28});
  layer.named("python_cnn");
  try {
    layer(keras::Input({3, 32, 32}));
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("layer 'python_cnn'"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("(None, 1, 28, 28)"));
  }
}

TEST(TorchScriptLayerTest, AnInputShapeTheForwardCannotTakeIsRefusedNamingTheFile) {
  auto module = load_torchscript(model_file("cnn_scripted.pt"));
  try {
    TorchScriptLayer layer(module, {3, 7, 7});
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cnn_scripted.pt"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("(None, 3, 7, 7)"));
  }
}

}  // namespace
}  // namespace dist::models
