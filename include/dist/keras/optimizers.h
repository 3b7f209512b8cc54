// Optimizers for Model::compile: a LibTorch optimizer type and its options, made when the model
// is compiled (over the mirrored model's parameters).
//
//   model.compile(strategy, keras::optimizers::Adam(1e-3), loss, {"accuracy"});
//   model.compile(strategy, keras::optimizers::make<torch::optim::RMSprop>(
//                               torch::optim::RMSpropOptions(1e-3)), loss);
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

namespace dist::keras {

struct Optimizer {
  std::string name;  // for summaries and errors
  std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor> parameters)> make;
};

namespace optimizers {

// Any LibTorch optimizer with its options.
template <class Opt, class Options>
Optimizer make(Options options, std::string name = "optimizer") {
  return {std::move(name), [options](std::vector<at::Tensor> parameters) {
            return std::make_unique<Opt>(std::move(parameters), options);
          }};
}

// Keras' defaults: Adam(learning_rate = 0.001), SGD(learning_rate = 0.01, momentum = 0).
inline Optimizer Adam(double learning_rate = 1e-3) {
  return make<torch::optim::Adam>(torch::optim::AdamOptions(learning_rate), "Adam");
}
inline Optimizer SGD(double learning_rate = 0.01, double momentum = 0.0) {
  return make<torch::optim::SGD>(torch::optim::SGDOptions(learning_rate).momentum(momentum), "SGD");
}

}  // namespace optimizers
}  // namespace dist::keras
