// SyncBatchNorm and convert_sync_batchnorm (dist/distribute/sync_batch_norm.h).
#include "dist/distribute/sync_batch_norm.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>

#include <string>

#include "dist/core/error.h"
#include "distribute/strategies/cross_replica_batch_norm.h"

namespace dist {

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options)
    : options(options) {
  DIST_CHECK_ARG(options.num_features() >= 1, "SyncBatchNorm needs num_features >= 1, got ",
                 options.num_features());
  reset();
}

void SyncBatchNormImpl::reset() {
  const int64_t features = options.num_features();
  if (options.affine()) {
    weight = register_parameter("weight", torch::ones({features}));
    bias = register_parameter("bias", torch::zeros({features}));
  } else {
    weight = register_parameter("weight", at::Tensor(), /*requires_grad=*/false);
    bias = register_parameter("bias", at::Tensor(), /*requires_grad=*/false);
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", torch::zeros({features}));
    running_var = register_buffer("running_var", torch::ones({features}));
    num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
  } else {
    running_mean = register_buffer("running_mean", at::Tensor());
    running_var = register_buffer("running_var", at::Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", at::Tensor());
  }
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  DIST_CHECK_ARG(input.dim() >= 2 && input.dim() <= 5,
                 "SyncBatchNorm takes [N, C], [N, C, L], [N, C, H, W] or [N, C, D, H, W] "
                 "inputs, got shape ",
                 input.sizes());
  DIST_CHECK_ARG(input.size(1) == options.num_features(), "SyncBatchNorm of ",
                 options.num_features(), " features got an input of ", input.size(1),
                 " channels (shape ", input.sizes(), ")");
  if (!is_training())  // evaluation is each replica's own: LibTorch's BatchNorm exactly
    return at::batch_norm(input, weight, bias, running_mean, running_var,
                          /*training=*/!options.track_running_stats(),
                          options.momentum().value_or(0.0), options.eps(),
                          /*cudnn_enabled=*/false);
  double momentum = options.momentum().value_or(0.0);
  if (options.track_running_stats()) {
    num_batches_tracked.add_(1);
    // No momentum: the cumulative average of every batch's statistics so far.
    if (!options.momentum().has_value())
      momentum = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
  }
  return detail::cross_replica_batch_norm(input, weight, bias, running_mean, running_var,
                                          /*training=*/true, momentum, options.eps());
}

namespace {

// The SyncBatchNorm for `child` if it is a BatchNorm1d/2d/3d (an empty AnyModule if not), on
// its device, of its dtype, its weights as trainable as they were.
template <typename BatchNorm>
torch::nn::AnyModule synchronized_copy(const std::shared_ptr<torch::nn::Module>& child) {
  auto* bn = dynamic_cast<BatchNorm*>(child.get());
  if (bn == nullptr) return {};
  SyncBatchNorm copy(bn->options);
  // Each tensor takes the original's values, dtype and device (Module::to would turn the
  // integer counter into floats too).
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : copy->named_parameters(/*recurse=*/false).pairs()) {
    if (!tensor.defined()) continue;
    const at::Tensor original = bn->named_parameters(false)[name];  // a copy: a temporary dict
    tensor.set_data(original.detach().clone());
    tensor.set_requires_grad(original.requires_grad());
  }
  for (auto& [name, tensor] : copy->named_buffers(/*recurse=*/false).pairs())
    if (tensor.defined()) tensor.set_data(bn->named_buffers(false)[name].clone());
  if (!bn->is_training()) copy->eval();
  return torch::nn::AnyModule(copy);
}

bool is_batch_norm(const torch::nn::Module& module) {
  return dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&module) != nullptr;
}

}  // namespace

torch::nn::Sequential convert_sync_batchnorm(const torch::nn::Sequential& model) {
  torch::nn::Sequential converted;
  const auto children = model->named_children();
  DIST_CHECK_ARG(children.size() == model->size(), "convert_sync_batchnorm: the Sequential has ",
                 model->size(), " modules but ", children.size(), " named children");
  auto modules = model->begin();  // AnyModules, which keep each child's forward
  for (size_t i = 0; i < model->size(); ++i, ++modules) {
    const std::string& name = children[i].key();
    const std::shared_ptr<torch::nn::Module>& child = children[i].value();
    torch::nn::AnyModule replacement;
    replacement = synchronized_copy<torch::nn::BatchNorm1dImpl>(child);
    if (replacement.is_empty()) replacement = synchronized_copy<torch::nn::BatchNorm2dImpl>(child);
    if (replacement.is_empty()) replacement = synchronized_copy<torch::nn::BatchNorm3dImpl>(child);
    converted->push_back(name, replacement.is_empty() ? *modules : replacement);
  }
  // A BatchNorm inside a child (a member its module calls itself) stays unsynchronized: say so
  // rather than train per replica unasked.
  for (const auto& [name, module] : converted->named_modules().pairs())
    DIST_CHECK_ARG(!is_batch_norm(*module), "convert_sync_batchnorm: '", name,
                   "' is a BatchNorm inside a module that calls it itself, which no converter "
                   "can replace; build it as dist::SyncBatchNorm in that module");
  if (!model->is_training()) converted->eval();
  return converted;
}

}  // namespace dist
