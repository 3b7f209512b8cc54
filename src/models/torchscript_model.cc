// The adapter of a TorchScript module to torch::nn::Module (dist/models/torchscript_model.h).
#include "dist/models/torchscript_model.h"

#include <torch/csrc/autograd/grad_mode.h>

#include <unordered_map>
#include <utility>

#include "dist/core/error.h"
#include "models/torchscript_describe.h"

namespace dist::models {
namespace {

// Gives every tensor attribute of `copy`, a deepcopy() of `original`, a copy of its own, with
// the original's requires_grad. deepcopy() alone is not enough: its memo takes tensors that
// share a storage for one tensor, so parameters that are views of one flat buffer (as the
// strategies' sharding packs them) would all become a copy of the first. `copied` keeps one
// copy per original tensor, so a tensor held in two places stays one tensor.
void copy_tensor_slots(const torch::jit::Module& original, const torch::jit::Module& copy,
                       std::unordered_map<const c10::TensorImpl*, at::Tensor>& copied) {
  const c10::intrusive_ptr<c10::ivalue::Object> from = original._ivalue();
  const c10::intrusive_ptr<c10::ivalue::Object> to = copy._ivalue();
  DIST_INTERNAL_ASSERT(from->slots().size() == to->slots().size(), "deepcopy of a module of ",
                       from->slots().size(), " attributes has ", to->slots().size());
  for (size_t i = 0; i < from->slots().size(); ++i) {
    const c10::IValue& value = from->getSlot(i);
    if (!value.isTensor() || !value.toTensor().defined()) continue;
    const at::Tensor& tensor = value.toTensor();
    auto [entry, inserted] = copied.emplace(tensor.unsafeGetTensorImpl(), at::Tensor());
    if (inserted) {
      entry->second = tensor.detach().clone();
      if (tensor.requires_grad()) entry->second.set_requires_grad(true);
    }
    to->setSlot(i, entry->second);
  }
  const auto originals = original.children();
  const auto copies = copy.children();
  auto child = copies.begin();
  for (const auto& original_child : originals) {
    DIST_INTERNAL_ASSERT(child != copies.end(), "deepcopy of a module has fewer submodules");
    copy_tensor_slots(original_child, *child, copied);
    ++child;
  }
}

}  // namespace

TorchScriptModuleImpl::TorchScriptModuleImpl(torch::jit::Module script, std::string file)
    : torch::nn::Module("TorchScriptModule"), script_(std::move(script)), file_(std::move(file)) {
  // Before the children exist, so that it sets this module's mode alone (a scripted submodule
  // may have been left in another mode than its parent).
  torch::nn::Module::train(script_.is_training());
  // Own tensors first, then the children in order: Python's state_dict order, and the order
  // in which torch::nn::Module lists a tree's parameters.
  for (const auto& p : script_.named_parameters(/*recurse=*/false))
    register_parameter(p.name, p.value, p.value.requires_grad());
  for (const auto& b : script_.named_buffers(/*recurse=*/false)) register_buffer(b.name, b.value);
  for (const auto& child : script_.named_children())
    register_module(child.name, std::make_shared<TorchScriptModuleImpl>(child.value, file_));
}

at::Tensor TorchScriptModuleImpl::forward(at::Tensor input) {
  c10::IValue output = script_.forward({std::move(input)});
  DIST_CHECK_ARG(output.isTensor(), "the forward of TorchScript module ", describe_file(file_),
                 " returned ", describe_value(output),
                 "; a model the strategies train must return one tensor: return the logits "
                 "alone from forward (compute other outputs in another method)");
  return std::move(output).toTensor();
}

std::shared_ptr<torch::nn::Module> TorchScriptModuleImpl::clone(
    const c10::optional<torch::Device>& device) const {
  torch::NoGradGuard no_grad;  // copies of values, not autograd nodes of the originals
  torch::jit::Module copy = script_.deepcopy();
  std::unordered_map<const c10::TensorImpl*, at::Tensor> copied;
  copy_tensor_slots(script_, copy, copied);
  if (device) copy.to(*device);
  return std::make_shared<TorchScriptModuleImpl>(std::move(copy), file_);
}

void TorchScriptModuleImpl::train(bool on) {
  script_.train(on);  // recursive: every scripted submodule's `training`
  torch::nn::Module::train(on);
}

}  // namespace dist::models
