// A Keras Model (dist/keras/model.h): built from layers, compiled under a strategy, called.
// Its training loop is model_fit.cc, evaluate and predict model_inference.cc, weights and
// checkpoints model_saving.cc; what they share is model_state.h.
#include "dist/keras/model.h"

#include <cmath>

#include "dist/core/error.h"
#include "dist/train/metrics.h"
#include "dist/train/mixed_precision.h"
#include "keras/graph_module.h"
#include "keras/model_state.h"

namespace dist::keras {
namespace {

using detail::CompiledMetric;
using detail::ModelState;

CompiledMetric make_metric(const std::string& name, const Loss& loss) {
  CompiledMetric m;
  if (name == "accuracy" || name == "acc" || name == "sparse_categorical_accuracy") {
    DIST_CHECK_ARG(
        loss.name() == "sparse_categorical_crossentropy" || name == "sparse_categorical_accuracy",
        "metric '", name, "' with loss '", loss.name(),
        "': only sparse categorical accuracy is available; use it with "
        "SparseCategoricalCrossentropy (integer labels)");
    m.metric = std::make_unique<metrics::SparseCategoricalAccuracy>(name);
    m.update = [](Metric& metric, const at::Tensor& y, const at::Tensor& p) {
      static_cast<metrics::SparseCategoricalAccuracy&>(metric).update_state(y, p);
    };
  } else if (name == "mae" || name == "mean_absolute_error") {
    m.metric = std::make_unique<metrics::MeanAbsoluteError>(name);
    m.update = [](Metric& metric, const at::Tensor& y, const at::Tensor& p) {
      static_cast<metrics::MeanAbsoluteError&>(metric).update_state(y, p);
    };
  } else {
    throw InvalidArgument("unknown metric '" + name +
                          "': use accuracy, sparse_categorical_accuracy or mae");
  }
  return m;
}

}  // namespace

Model& Callback::model() const {
  DIST_CHECK_ARG(model_ != nullptr,
                 "this callback has no model yet; pass it to fit, evaluate "
                 "or predict");
  return *model_;
}

Model::Model(const KerasTensor& inputs, const KerasTensor& outputs, std::string name)
    : Model(inputs, outputs, std::move(name), /*sequential=*/false) {}

Model::Model(const KerasTensor& inputs, const KerasTensor& outputs, std::string name,
             bool sequential)
    : state_(std::make_shared<ModelState>()) {
  state_->name = std::move(name);
  state_->graph = detail::Graph::trace(inputs.node(), outputs.node(), sequential);
  state_->module = detail::GraphModule(state_->graph);
}

Model Sequential(const Shape& input_shape, const std::vector<Layer>& layers, std::string name) {
  DIST_CHECK_ARG(!layers.empty(), "Sequential '", name, "' needs at least one layer");
  KerasTensor input = Input(input_shape);
  KerasTensor x = input;
  for (const Layer& layer : layers) x = layer(x);
  return Model(input, x, std::move(name), /*sequential=*/true);
}

const std::string& Model::name() const { return state_->name; }
bool Model::compiled() const { return state_->mirrored.has_value(); }
mixed_precision::Policy Model::dtype_policy() const { return state_->policy; }
void Model::set_dtype_policy(mixed_precision::Policy policy) {
  mixed_precision::check_supported(policy);
  state_->policy = policy;
}
const Strategy& Model::strategy() const { return state_->strategy; }
bool Model::is_chief() const { return state_->strategy.is_chief(); }
void Model::set_stop_training(bool stop) { state_->stop_training = stop; }
bool Model::stop_training() const { return state_->stop_training; }
std::shared_ptr<torch::nn::Module> Model::module() const { return state_->module.ptr(); }

void Model::compile(const Strategy& strategy, const Optimizer& optimizer,
                    std::shared_ptr<const Loss> loss, const std::vector<std::string>& metrics) {
  ModelState& s = *state_;
  DIST_CHECK_ARG(loss != nullptr, "compile: the loss is null");
  DIST_CHECK_ARG(optimizer.make != nullptr, "compile: the optimizer '", optimizer.name,
                 "' has no make function");
  if (s.mirrored) {
    // The copies (and, across workers, the gradient hooks) belong to the first strategy.
    DIST_CHECK_ARG(&s.strategy.extended() == &strategy.extended(), "compile: model '", s.name,
                   "' was compiled under ", s.strategy.extended().describe(),
                   " and cannot move to ", strategy.extended().describe(),
                   "; build a new model under the new strategy");
  }
  // Everything is made before anything is kept, so a failed compile leaves the model as it was.
  std::vector<CompiledMetric> compiled_metrics;
  for (const std::string& name : metrics) compiled_metrics.push_back(make_metric(name, *loss));
  std::optional<Mirrored<detail::GraphModule>> mirrored = s.mirrored;
  if (!mirrored) mirrored.emplace(strategy.mirror(s.module));
  std::unique_ptr<torch::optim::Optimizer> made;
  try {
    made = optimizer.make(mirrored->variables().trainable_variables());
  } catch (const c10::Error& e) {
    throw InvalidArgument("compile: optimizer '" + optimizer.name +
                          "' rejected its options: " + e.what_without_backtrace());
  }
  DIST_CHECK_ARG(made != nullptr, "compile: optimizer '", optimizer.name, "' made nothing");
  s.strategy = strategy;
  s.mirrored = std::move(mirrored);
  s.optimizer =
      std::make_shared<MirroredOptimizer>(s.mirrored->shared_variables(), std::move(made));
  s.loss = std::move(loss);
  s.loss_tracker = std::make_unique<metrics::Mean>("loss");
  s.metrics = std::move(compiled_metrics);
}

at::Tensor Model::operator()(const at::Tensor& x) const {
  if (state_->mirrored) state_->mirrored->variables().prepare_to_read();
  torch::NoGradGuard no_grad;
  auto& module = *state_->module;
  const bool was_training = module.is_training();
  module.eval();
  at::Tensor y =
      mixed_precision::forward_in_policy([&] { return module.forward(x); }, state_->policy);
  module.train(was_training);
  return y;
}

double Model::learning_rate() const {
  detail::check_compiled(*state_, "learning_rate");
  return state_->optimizer->learning_rate();
}

void Model::set_learning_rate(double learning_rate) {
  detail::check_compiled(*state_, "set_learning_rate");
  DIST_CHECK_ARG(std::isfinite(learning_rate) && learning_rate >= 0,
                 "learning rate must be a finite non-negative number, got ", learning_rate);
  state_->optimizer->set_learning_rate(learning_rate);
}

}  // namespace dist::keras
