// Model::evaluate and Model::predict (dist/keras/model.h): the data through the replicas'
// copies without training, and run_test, which fit's validation runs too.
#include "dist/core/error.h"
#include "dist/keras/model.h"
#include "keras/model_state.h"

namespace dist::keras {
namespace detail {

// Runs the data through the model without training; fills the compiled metrics.
Logs run_test(ModelState& s, const DistributedDataset& data, int64_t steps,
              const CallbackList& callbacks) {
  reset_metrics(s);
  callbacks.each([](Callback& c) { c.on_test_begin({}); });
  set_training(s, false);
  int64_t step = 0;
  auto it = data.iterator(0);
  while (steps < 0 || step < steps) {
    auto batch = it.next();
    if (!batch) break;
    callbacks.each([&](Callback& c) { c.on_test_batch_begin(step, {}); });
    auto losses = s.strategy.run(
        [&](const data::Element& b) {
          check_element(b, 2, "evaluate");
          torch::NoGradGuard no_grad;
          at::Tensor y_pred = replica_forward(s, b[0]);
          for (auto& m : s.metrics) m.update(*m.metric, b[1], y_pred);
          return replica_loss(*s.loss, b[1], y_pred);
        },
        *batch);
    track_loss(s, losses, batch->global_batch_size());
    Logs logs = metric_logs(s, /*global=*/false);
    callbacks.each([&](Callback& c) { c.on_test_batch_end(step, logs); });
    ++step;
  }
  Logs logs = metric_logs(s, /*global=*/true);
  callbacks.each([&](Callback& c) { c.on_test_end(logs); });
  return logs;
}

}  // namespace detail

namespace {

using data::Element;
using detail::CallbackList;
using detail::check_compiled;
using detail::check_element;
using detail::make_callbacks;
using detail::ModelState;
using detail::replica_forward;
using detail::run_test;
using detail::set_training;

// evaluate's and predict's common start: checked options, the distributed data, the callbacks.
std::pair<DistributedDataset, CallbackList> start_inference(Model* model, ModelState& s,
                                                            const data::Dataset& data,
                                                            const EvaluateOptions& options,
                                                            const char* what) {
  check_compiled(s, what);
  DIST_CHECK_ARG(options.steps == -1 || options.steps >= 1, what,
                 ": steps must be at least 1, or -1 for all; got ", options.steps);
  auto distributed = s.strategy.experimental_distribute_dataset(data);
  int64_t steps = distributed.cardinality() >= 0 ? distributed.cardinality() : -1;
  if (options.steps > 0) steps = steps < 0 ? options.steps : std::min(steps, options.steps);
  CallbackList callbacks =
      make_callbacks(model, options.callbacks, options.verbose, options.out,
                     {{"steps", static_cast<double>(steps)}, {"verbose", options.verbose}});
  return {std::move(distributed), std::move(callbacks)};
}

}  // namespace

Logs Model::evaluate(const data::Dataset& data, const EvaluateOptions& options) {
  auto [distributed, callbacks] = start_inference(this, *state_, data, options, "evaluate");
  return run_test(*state_, distributed, options.steps, callbacks);
}

at::Tensor Model::predict(const data::Dataset& data, const EvaluateOptions& options) {
  ModelState& s = *state_;
  auto [distributed, callbacks] = start_inference(this, s, data, options, "predict");
  callbacks.each([](Callback& c) { c.on_predict_begin({}); });
  set_training(s, false);
  std::vector<at::Tensor> outputs;
  int64_t step = 0;
  auto it = distributed.iterator(0);
  while (options.steps < 0 || step < options.steps) {
    auto batch = it.next();
    if (!batch) break;
    callbacks.each([&](Callback& c) { c.on_predict_batch_begin(step, {}); });
    auto predictions = s.strategy.run(
        [&](const Element& b) {
          check_element(b, 1, "predict");
          torch::NoGradGuard no_grad;
          return replica_forward(s, b[0]);
        },
        *batch);
    outputs.push_back(s.strategy.gather(predictions, 0));
    callbacks.each([&](Callback& c) { c.on_predict_batch_end(step, {}); });
    ++step;
  }
  callbacks.each([](Callback& c) { c.on_predict_end({}); });
  DIST_CHECK_ARG(!outputs.empty(), "predict: the dataset is empty");
  return torch::cat(outputs, 0);
}

}  // namespace dist::keras
