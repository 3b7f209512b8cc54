// A TorchScript module (torchscript_model.h) as one Keras layer, so that keras::Model's fit and
// evaluate train and run it under any strategy, as the custom loop does with the module itself:
//
//   auto module = dist::models::load_torchscript("cnn.pt");
//   dist::keras::KerasTensor input = dist::keras::Input({1, 28, 28});
//   dist::keras::Model model(input, dist::models::TorchScriptLayer(module, {1, 28, 28})(input));
//   model.compile(...); model.fit(...);
//
// Every model made from the layer (one per replica, one per clone) gets a deep copy of the
// module, so `module` itself is never trained: read the trained copy from the model (its
// module, then the layer's child). The layer's weights are the module's parameters and buffers
// under the layer's name ("torchscript.conv1.weight").
#pragma once

#include "dist/keras/layers.h"
#include "dist/models/torchscript_model.h"

namespace dist::models {

class TorchScriptLayer : public keras::Layer {
 public:
  // `input`: one example's shape (no batch axis), the only shape the layer accepts. The
  // output's shape is what one forward of a zero example gives (in evaluation mode, without
  // gradients; the module's mode is put back); InvalidArgument naming the module's file if
  // that forward fails or returns anything but one tensor. Default name "torchscript".
  TorchScriptLayer(TorchScriptModule module, keras::Shape input);
};

}  // namespace dist::models
