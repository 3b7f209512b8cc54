#include "dist/models/torchscript_layer.h"

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/core/error.h"

namespace dist::models {
namespace {

// One example's output shape: a forward of a batch of one zero example, in evaluation mode
// (BatchNorm uses its running statistics, which do not move), without gradients.
keras::Shape output_shape_of(TorchScriptModuleImpl& module, const keras::Shape& input) {
  std::vector<int64_t> batch{1};
  batch.insert(batch.end(), input.begin(), input.end());
  const bool training = module.is_training();
  module.eval();
  at::Tensor output;
  try {
    torch::NoGradGuard no_gradients;
    output = module.forward(torch::zeros(batch));
  } catch (const std::exception& e) {
    module.train(training);
    throw InvalidArgument(detail::concat("TorchScript module ", module.file(),
                                         ": its forward fails on a zero example of shape ",
                                         keras::shape_to_string(input), ": ", e.what()));
  }
  module.train(training);
  return keras::Shape(output.sizes().begin() + 1, output.sizes().end());
}

class TorchScriptSpec : public keras::detail::LayerSpec {
 public:
  TorchScriptSpec(TorchScriptModule module, keras::Shape input)
      : LayerSpec("TorchScript"),
        module_(std::move(module)),
        input_(std::move(input)),
        output_(output_shape_of(*module_, input_)) {}

  std::string default_name() const override { return "torchscript"; }
  keras::Shape output_shape(const std::vector<keras::Shape>& inputs,
                            const std::string& name) const override {
    DIST_CHECK_ARG(inputs.size() == 1 && inputs[0] == input_, "layer '", name,
                   "' (TorchScript module ", module_->file(), ") takes examples of shape ",
                   keras::shape_to_string(input_), "; it was given ",
                   inputs.empty() ? std::string("nothing") : keras::shape_to_string(inputs[0]));
    return output_;
  }
  std::shared_ptr<torch::nn::Module> make_module(const std::vector<keras::Shape>&) const override {
    return module_->clone();
  }
  at::Tensor call(torch::nn::Module* module, const std::vector<at::Tensor>& inputs,
                  bool training) const override {
    auto* script = static_cast<TorchScriptModuleImpl*>(module);
    if (script->is_training() != training) script->train(training);
    return script->forward(inputs[0]);
  }

 private:
  TorchScriptModule module_;
  keras::Shape input_;
  keras::Shape output_;
};

}  // namespace

TorchScriptLayer::TorchScriptLayer(TorchScriptModule module, keras::Shape input)
    : Layer(std::make_shared<TorchScriptSpec>(std::move(module), std::move(input))) {}

}  // namespace dist::models
