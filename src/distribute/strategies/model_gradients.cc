#include "dist/distribute/model_gradients.h"

#include <torch/autograd.h>
#include <torch/nn/module.h>

#include "dist/core/error.h"

namespace dist {

void backward(const at::Tensor& loss, const DistributedVariables& model,
              const BackwardOptions& options) {
  DIST_CHECK_ARG(loss.defined(), "backward(loss, model): the loss is an undefined tensor");
  DIST_CHECK_ARG(loss.numel() == 1, "backward(loss, model): the loss must be a scalar, got shape ",
                 loss.sizes(), "; reduce it first (e.g. compute_average_loss)");
  DIST_CHECK_ARG(loss.requires_grad(),
                 "backward(loss, model): the loss does not require gradients (was it computed "
                 "under NoGradGuard, or from detached tensors?)");
  std::vector<at::Tensor> inputs;
  for (const auto& p : model.current()->parameters())
    if (p.requires_grad()) inputs.push_back(p);
  DIST_CHECK_ARG(!inputs.empty(), "backward(loss, model): model ", model.primary()->name(),
                 " has no trainable variables");
  // With `inputs`, the engine runs only the part of the graph that leads to them and
  // accumulates only into them: AccumulateGrad of other models' parameters never runs, so
  // their gradients and their reducers' hooks are untouched. Parameters the loss does not
  // reach get no gradient (the reducers count them as zero).
  try {
    torch::autograd::backward({loss.reshape({})}, /*grad_tensors=*/{}, options.retain_graph,
                              /*create_graph=*/false, inputs);
  } catch (const c10::Error& e) {
    throw InvalidArgument(detail::concat("backward(loss, model) for model ",
                                         model.primary()->name(), ": ",
                                         e.what_without_backtrace()));
  }
}

}  // namespace dist
