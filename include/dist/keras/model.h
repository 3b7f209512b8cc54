// Model: Keras' compile / fit / evaluate / predict, distributed by the strategy it is compiled
// under. Only the strategy line changes between one device, several replicas, and several
// workers:
//
//   dist::Strategy strategy = dist::MirroredStrategy();        // or OneDeviceStrategy, ...
//   using namespace dist::keras;
//   Model model = Sequential({1, 28, 28}, {layers::Conv2D(32, 3).activation("relu"),
//                                          layers::MaxPooling2D(), layers::Flatten(),
//                                          layers::Dense(64, "relu"), layers::Dense(10)});
//   model.compile(strategy, optimizers::Adam(1e-3),
//                 dist::SparseCategoricalCrossentropy(/*from_logits=*/true), {"accuracy"});
//   FitOptions options;
//   options.epochs = 10;
//   options.validation_data = test.batch(global_batch);
//   History history = model.fit(train.shuffle(60000, 1).batch(global_batch), options);
//
// Datasets hold GLOBAL batches of (x, y) elements; the strategy splits each across its replicas
// (Strategy::experimental_distribute_dataset). The loss is scaled by the global batch size
// inside fit (compute_average_loss), whatever Reduction the loss was made with, so no manual
// scaling is needed: a loss with Reduction::kSum sums over the global batch; every other
// reduction averages over it.
//
// Under ParameterServerStrategy every task runs the same program and calls fit once, with
// steps_per_epoch set; the chief schedules the steps, ps and worker tasks serve them and
// return an empty History (docs/design.md, "ParameterServerStrategy (asynchronous training
// over gRPC)").
//
// A Model is a handle: copies share one model.
#pragma once

#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/data/dataset.h"
#include "dist/distribute/strategy.h"
#include "dist/keras/callback.h"
#include "dist/keras/layers.h"
#include "dist/keras/optimizers.h"
#include "dist/train/checkpoint.h"
#include "dist/train/loss.h"
#include "dist/train/mixed_precision.h"

namespace dist::keras {

namespace detail {
struct ModelState;
}

// What fit returns: the epochs run and each epoch's logs (tf.keras.callbacks.History).
struct History {
  std::vector<int> epoch;
  std::map<std::string, std::vector<double>> history;  // "loss" -> one value per epoch, ...
};

struct FitOptions {
  int epochs = 1;
  int initial_epoch = 0;  // start at this epoch (0-based), e.g. to continue a run
  // At most this many steps per epoch; -1: until the data ends. Under ParameterServerStrategy
  // exactly this many, and required (there each worker's data is repeated, so it never ends).
  int64_t steps_per_epoch = -1;
  std::optional<data::Dataset> validation_data;  // global batches of (x, y), after each epoch
  int64_t validation_steps = -1;                 // -1: all of validation_data
  std::vector<std::shared_ptr<Callback>> callbacks;
  // 0: silent; 1: a progress bar per epoch (redrawn in place on a terminal, a line every tenth
  // of the epoch otherwise); 2: one line per epoch. Only the chief prints.
  int verbose = 1;
  std::ostream* out = nullptr;  // where progress goes; nullptr: std::cout
};

struct EvaluateOptions {
  int64_t steps = -1;  // -1: all of the data
  std::vector<std::shared_ptr<Callback>> callbacks;
  int verbose = 1;
  std::ostream* out = nullptr;
};

class Model {
 public:
  // A functional model from its input to its output (every layer between is included).
  Model(const KerasTensor& inputs, const KerasTensor& outputs, std::string name = "model");

  const std::string& name() const;
  // Prints each layer with its output shape and parameter count, then the totals, as Keras
  // does (BatchNormalization's moving statistics count as non-trainable parameters).
  void summary(std::ostream& out = std::cout) const;
  int64_t count_params() const;  // trainable and non-trainable

  // Makes the model's variables and optimizer under `strategy` (Keras: inside
  // strategy.scope()). Metrics: "accuracy" (sparse categorical accuracy, as Keras picks for
  // an integer-label loss), "sparse_categorical_accuracy", "mae" / "mean_absolute_error".
  // Compiling again replaces the optimizer, loss and metrics; the weights are kept.
  void compile(const Strategy& strategy, const Optimizer& optimizer,
               std::shared_ptr<const Loss> loss, const std::vector<std::string>& metrics = {});
  template <class L, class = std::enable_if_t<std::is_base_of_v<Loss, L>>>
  void compile(const Strategy& strategy, const Optimizer& optimizer, const L& loss,
               const std::vector<std::string>& metrics = {}) {
    compile(strategy, optimizer, std::make_shared<L>(loss), metrics);
  }
  // The default strategy (one device, no distribution).
  template <class L>
  void compile(const Optimizer& optimizer, const L& loss,
               const std::vector<std::string>& metrics = {}) {
    compile(get_default_strategy(), optimizer, loss, metrics);
  }
  bool compiled() const;

  // The mixed precision policy (mixed_precision.h) of fit, evaluate, predict and operator():
  // the global policy when the model was made, as Keras layers take it when they are made.
  // set_dtype_policy changes this model's alone (InvalidArgument if it cannot run here).
  mixed_precision::Policy dtype_policy() const;
  void set_dtype_policy(mixed_precision::Policy policy);

  // Trains on global batches of (x, y); see FitOptions. Under ParameterServerStrategy see the
  // top of this file: on ps and worker tasks it serves, then returns an empty History, or
  // throws CollectiveError when the chief fell silent for the strategy's coordinator_timeout.
  History fit(const data::Dataset& train, const FitOptions& options = {});
  // The loss and metrics over global batches of (x, y), e.g. {"loss": 0.31, "accuracy": 0.89}.
  Logs evaluate(const data::Dataset& data, const EvaluateOptions& options = {});
  // The model's outputs for every example of data (global batches of (x) or (x, y)), in
  // order, concatenated along the batch axis.
  at::Tensor predict(const data::Dataset& data, const EvaluateOptions& options = {});
  // The output for one batch x, computed by the primary copy in evaluation mode without
  // recording gradients.
  at::Tensor operator()(const at::Tensor& x) const;

  // --- for callbacks and tools ---

  // The strategy it was compiled under (the default strategy before compile()).
  const Strategy& strategy() const;
  // True in the process that holds replica 0: the one that prints and writes files.
  bool is_chief() const;
  // Set to stop fit after the current step (by every worker at the same step; see callback.h).
  void set_stop_training(bool stop);
  bool stop_training() const;

  double learning_rate() const;
  void set_learning_rate(double learning_rate);

  // Parameters and floating-point buffers by name ("conv2d.weight", ...), of the primary copy
  // (under ParameterServerStrategy first read from the ps tasks).
  std::vector<std::pair<std::string, at::Tensor>> weights() const;
  // Copies values into every copy's weights; every name and shape must match.
  void set_weights(const std::vector<std::pair<std::string, at::Tensor>>& weights);
  // Under sharding 'parameters' with several workers each keeps a share of every weight: this
  // collective, called by every worker, makes them whole until the next step or forward, so
  // that weights(), save_weights and operator() can read them (on one worker, or on all).
  // Otherwise it does nothing. fit, evaluate, predict, set_weights and load_weights (called on
  // every worker), ModelCheckpoint and EarlyStopping need none.
  void gather_weights();
  // Weights as a safetensors file (atomically replaced); load checks names and shapes.
  void save_weights(const std::string& path) const;
  void load_weights(const std::string& path);

  // A Checkpoint of the weights and the optimizer (for BackupAndRestore); needs compile().
  Checkpoint checkpoint() const;
  // Training steps fit has taken (continuing a resumed fit's count); cheap, local.
  int64_t global_step() const;
  // Where fit is: global step, epoch, data position, and the epoch's metric sums so far.
  // A collective under MultiWorkerMirroredStrategy (the metric sums are global).
  TrainingState training_state() const;
  // Makes the coming fit() (called from on_train_begin: the current one) continue from
  // `state` as training_state() returned it.
  void resume_training_at(const TrainingState& state);

  // The primary copy as a LibTorch module.
  std::shared_ptr<torch::nn::Module> module() const;

 private:
  friend Model Sequential(const Shape&, const std::vector<Layer>&, std::string);
  // sequential: made by Sequential (summary() then shows no input row and no connections).
  Model(const KerasTensor& inputs, const KerasTensor& outputs, std::string name, bool sequential);
  // A weight's element count, also while the strategy keeps it in shares (sharding
  // 'parameters'): for summary() and count_params().
  int64_t weight_numel(const at::Tensor& weight) const;
  std::shared_ptr<detail::ModelState> state_;
};

// A model that applies layers one after the other to an input of `input_shape`.
Model Sequential(const Shape& input_shape, const std::vector<Layer>& layers,
                 std::string name = "sequential");

}  // namespace dist::keras
