#include "keras/model_state.h"

#include <iostream>

#include "dist/core/error.h"
#include "dist/keras/callbacks.h"

namespace dist::keras::detail {

void check_compiled(const ModelState& s, const char* what) {
  DIST_CHECK_ARG(s.mirrored.has_value(), what, ": model '", s.name,
                 "' is not compiled; call compile(strategy, optimizer, loss, metrics) first");
}

void set_training(ModelState& s, bool on) { s.mirrored->train(on); }

at::Tensor replica_forward(ModelState& s, const at::Tensor& x) {
  return mixed_precision::forward_in_policy([&] { return s.mirrored->operator->()->forward(x); },
                                            s.policy);
}

void reset_metrics(ModelState& s) {
  s.loss_tracker->reset_state();
  for (auto& m : s.metrics) m.metric->reset_state();
}

at::Tensor replica_loss(const Loss& loss, const at::Tensor& y_true, const at::Tensor& y_pred) {
  at::Tensor per_example = loss.unreduced(y_true, y_pred);
  if (loss.reduction() == Reduction::kSum) return per_example.sum();
  return compute_average_loss(per_example);
}

Logs metric_logs(const ModelState& s, bool global, const std::string& prefix) {
  Logs logs;
  logs[prefix + "loss"] = global ? s.loss_tracker->result() : s.loss_tracker->local_result();
  for (const auto& m : s.metrics)
    logs[prefix + m.metric->name()] = global ? m.metric->result() : m.metric->local_result();
  return logs;
}

std::vector<Metric*> all_metrics(ModelState& s) {
  std::vector<Metric*> all{s.loss_tracker.get()};
  for (auto& m : s.metrics) all.push_back(m.metric.get());
  return all;
}

void track_loss(ModelState& s, const PerReplica<at::Tensor>& losses, int64_t global_batch) {
  at::Tensor total = s.strategy.reduce(ReduceOp::kSum, losses);
  s.loss_tracker->update_state(total, torch::tensor(static_cast<double>(global_batch)));
}

void check_element(const data::Element& element, size_t at_least, const char* what) {
  DIST_CHECK_ARG(element.size() >= at_least, what, " needs dataset elements of ",
                 at_least == 2 ? "(x, y)" : "(x) or (x, y)", ", got an element of ", element.size(),
                 " tensors");
}

CallbackList make_callbacks(Model* model, const std::vector<std::shared_ptr<Callback>>& user,
                            int verbose, std::ostream* out, const Logs& params) {
  DIST_CHECK_ARG(verbose >= 0 && verbose <= 2, "verbose must be 0, 1 or 2, got ", verbose);
  CallbackList list;
  // As in Keras, the progress bar comes first, so it prints an epoch before the others act.
  if (verbose > 0 && model->is_chief())
    list.callbacks.push_back(std::make_shared<ProgbarLogger>(out ? *out : std::cout));
  for (const auto& callback : user) {
    DIST_CHECK_ARG(callback != nullptr, "callbacks: a callback is null");
    list.callbacks.push_back(callback);
  }
  for (const auto& callback : list.callbacks) {
    callback->set_model(model);
    callback->set_params(params);
  }
  return list;
}

}  // namespace dist::keras::detail
