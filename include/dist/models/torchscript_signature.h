// A TorchScript module's forward of any signature: several tensors, named tensors, a dict of
// named tensors, optional and defaulted arguments; returning a tensor, a tuple or a dict of them.
// Inputs bind to the scripted forward's arguments by name (NamedTensors, or a data::Element's
// named components) or by position; an argument that gets nothing and has no default is an
// InvalidArgument naming it, the signature and the inputs there are. These functions run the
// module's forward: one replica's copy, one thread at a time.
//
//   auto model = strategy.mirror(dist::models::load_torchscript("lm.pt"));
//   std::cout << dist::models::check_forward(*model, inputs).description;  // once, before
//   at::Tensor logits = dist::models::forward_tensor(*model, b);  // in the step: b["tokens"], ...
//
// How each kind of argument binds: docs/guide.md, "Any forward signature".
#pragma once

#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include "dist/data/element.h"
#include "dist/models/torchscript_model.h"

namespace dist::models {

// Tensors by name, in name order.
using NamedTensors = std::map<std::string, at::Tensor>;

struct ForwardArgument {
  std::string name;
  std::string type;  // TorchScript's annotation: "Tensor", "Optional[Tensor]", "Dict[str, Tensor]"
  bool has_default = false;
};

// The scripted forward's arguments (self excluded) and return type.
struct ForwardSignature {
  std::vector<ForwardArgument> arguments;
  std::string returns;  // "Tensor", "Tuple[Tensor, Tensor]", "Dict[str, Tensor]", ...
  // "forward(tokens: Tensor, mask: Optional[Tensor] = ...) -> Tensor"
  std::string to_string() const;
};

// Reads `model`'s forward schema. InvalidArgument, naming the file, if it has no forward.
ForwardSignature forward_signature(const TorchScriptModuleImpl& model);

// Runs the scripted forward on inputs bound by name or by position (see the top of this file)
// in the module's current mode, with autograd as the caller has it, and returns what it
// returned. InvalidArgument when the inputs do not bind; exceptions raised inside the scripted
// code pass through.
c10::IValue call_forward(TorchScriptModuleImpl& model, const NamedTensors& inputs);
c10::IValue call_forward(TorchScriptModuleImpl& model, const std::vector<at::Tensor>& inputs);

// A dataset's element as the inputs: by name when its components are named (Element{{"tokens",
// t}, {"mask", m}}, parse_example's features, what padded_batch and the distributed datasets
// keep), else by position. The overloads below taking an Element do the same.
c10::IValue call_forward(TorchScriptModuleImpl& model, const data::Element& inputs);

// The named components of `element` as NamedTensors. InvalidArgument, describing the element,
// when its components have no names.
NamedTensors named_tensors(const data::Element& element);

// The tensors of a forward's result by name: a tensor as "output", a tuple's as "0", "1", ...,
// a dict's (Dict[str, Tensor]) under its keys. InvalidArgument, saying what it is, for
// anything else.
NamedTensors output_tensors(const c10::IValue& output);

// call_forward, then one tensor of the result: `output` "" takes the result when it is a
// tensor, else names the tuple index ("0") or dict key ("logits") to take. InvalidArgument
// saying what came back when there is no such tensor.
at::Tensor forward_tensor(TorchScriptModuleImpl& model, const NamedTensors& inputs,
                          const std::string& output = "");
at::Tensor forward_tensor(TorchScriptModuleImpl& model, const std::vector<at::Tensor>& inputs,
                          const std::string& output = "");
at::Tensor forward_tensor(TorchScriptModuleImpl& model, const data::Element& inputs,
                          const std::string& output = "");

// The start-up check for any signature: one forward on these inputs in evaluation mode without
// gradients (BatchNorm's statistics do not move; the mode is put back), and what it did:
//   "'lm.pt': forward(tokens: Tensor, mask: Tensor) -> Tensor called with tokens = a tensor
//    of shape [8, 64] and dtype Long, mask = a tensor of shape [8, 64] and dtype Bool;
//    it returned a tensor of shape [8, 64, 65] and dtype Float"
// Throws InvalidArgument with that description up to the call and the scripted exception's
// line when the inputs do not bind or the forward raises, and when the result holds no tensor
// output_tensors can name.
struct ForwardReport {
  c10::IValue output;
  NamedTensors outputs;  // output_tensors(output)
  std::string description;
};
ForwardReport check_forward(TorchScriptModuleImpl& model, const NamedTensors& inputs);
ForwardReport check_forward(TorchScriptModuleImpl& model, const std::vector<at::Tensor>& inputs);
ForwardReport check_forward(TorchScriptModuleImpl& model, const data::Element& inputs);

}  // namespace dist::models
