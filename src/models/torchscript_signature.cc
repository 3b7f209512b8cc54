// A scripted forward of any signature (dist/models/torchscript_signature.h): its schema, the
// binding of named or positional tensors to its arguments, its outputs and the start-up check.
#include "dist/models/torchscript_signature.h"

#include <ATen/core/function_schema.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "dist/core/error.h"
#include "models/mode_restorer.h"
#include "models/torchscript_describe.h"

namespace dist::models {
namespace {

enum class Kind { kTensor, kOptionalTensor, kTensorDict, kOther };

Kind kind_of(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return Kind::kTensor;
  if (const auto optional = type->cast<c10::OptionalType>()) {
    if (optional->getElementType()->kind() == c10::TypeKind::TensorType)
      return Kind::kOptionalTensor;
  }
  if (const auto dict = type->cast<c10::DictType>()) {
    if (dict->getKeyType()->kind() == c10::TypeKind::StringType &&
        dict->getValueType()->kind() == c10::TypeKind::TensorType)
      return Kind::kTensorDict;
  }
  return Kind::kOther;
}

const c10::FunctionSchema& schema_of(const TorchScriptModuleImpl& model) {
  const auto method = model.script().find_method("forward");
  DIST_CHECK_ARG(method.has_value(), "TorchScript module ", describe_file(model.file()),
                 " has no forward method");
  return method->function().getSchema();
}

// The schema's arguments without self.
std::vector<c10::Argument> arguments_of(const c10::FunctionSchema& schema) {
  const auto& all = schema.arguments();
  return std::vector<c10::Argument>(all.begin() + (all.empty() ? 0 : 1), all.end());
}

// Every input, and those no argument takes (none when a Dict[str, Tensor] argument takes the
// rest).
std::string describe_inputs(const c10::FunctionSchema& schema, const NamedTensors& inputs) {
  if (inputs.empty()) return "no tensors";
  std::ostringstream out;
  bool first = true;
  for (const auto& [name, tensor] : inputs) {
    out << (first ? "" : ", ") << name << " = " << describe_value(tensor);
    first = false;
  }
  std::set<std::string> names;
  for (const auto& argument : arguments_of(schema)) {
    if (kind_of(argument.type()) == Kind::kTensorDict) return out.str();
    names.insert(argument.name());
  }
  std::string left_out;
  for (const auto& entry : inputs)
    if (!names.count(entry.first)) left_out += (left_out.empty() ? "" : ", ") + entry.first;
  if (!left_out.empty()) out << " (no argument takes " << left_out << ")";
  return out.str();
}

std::string describe_inputs(const c10::FunctionSchema&, const std::vector<at::Tensor>& inputs) {
  if (inputs.empty()) return "no tensors";
  std::ostringstream out;
  for (size_t i = 0; i < inputs.size(); ++i) out << (i ? ", " : "") << describe_value(inputs[i]);
  return out.str();
}

std::string names_of(const NamedTensors& inputs) {
  std::string names;
  for (const auto& entry : inputs) names += (names.empty() ? "" : ", ") + entry.first;
  return names.empty() ? "none" : names;
}

// What `model`'s forward is, for messages: "'lm.pt': forward(tokens: Tensor) -> Tensor".
std::string who(const TorchScriptModuleImpl& model) {
  return describe_file(model.file()) + ": " + forward_signature(model).to_string();
}

// The value an argument gets when the inputs give none: its default, else an error.
c10::IValue default_of(const TorchScriptModuleImpl& model, const c10::Argument& argument,
                       const std::string& inputs) {
  if (argument.default_value().has_value()) return *argument.default_value();
  if (kind_of(argument.type()) == Kind::kOptionalTensor) return c10::IValue();
  throw InvalidArgument(detail::concat(
      "TorchScript module ", who(model), ": argument '", argument.name(), ": ",
      argument.type()->annotation_str(), "' gets no value and has no default; the inputs are ",
      inputs,
      kind_of(argument.type()) == Kind::kOther
          ? std::string("; the library passes tensors only: give it a default in Python")
          : std::string("; name an input '") + argument.name() + "'"));
}

std::vector<c10::IValue> bind_inputs(const TorchScriptModuleImpl& model,
                                     const NamedTensors& inputs) {
  const std::vector<c10::Argument> arguments = arguments_of(schema_of(model));
  std::set<std::string> taken;
  for (const auto& argument : arguments)
    if (kind_of(argument.type()) != Kind::kTensorDict && inputs.count(argument.name()))
      taken.insert(argument.name());
  std::vector<c10::IValue> stack;
  for (const auto& argument : arguments) {
    const auto found = inputs.find(argument.name());
    switch (kind_of(argument.type())) {
      case Kind::kTensor:
      case Kind::kOptionalTensor:
        stack.push_back(found != inputs.end()
                            ? c10::IValue(found->second)
                            : default_of(model, argument, "named " + names_of(inputs)));
        break;
      case Kind::kTensorDict: {
        c10::Dict<std::string, at::Tensor> dict;
        for (const auto& [name, tensor] : inputs)
          if (!taken.count(name)) dict.insert(name, tensor);
        stack.push_back(c10::IValue(dict));
        break;
      }
      case Kind::kOther:
        stack.push_back(default_of(model, argument, "named " + names_of(inputs)));
        break;
    }
  }
  return stack;
}

std::vector<c10::IValue> bind_inputs(const TorchScriptModuleImpl& model,
                                     const std::vector<at::Tensor>& inputs) {
  const std::vector<c10::Argument> arguments = arguments_of(schema_of(model));
  DIST_CHECK_ARG(inputs.size() <= arguments.size(), "TorchScript module ", who(model), ": ",
                 inputs.size(), " tensors given for ", arguments.size(), " arguments");
  std::vector<c10::IValue> stack;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::Argument& argument = arguments[i];
    if (i >= inputs.size()) {
      stack.push_back(
          default_of(model, argument, std::to_string(inputs.size()) + " tensors by position"));
      continue;
    }
    const Kind kind = kind_of(argument.type());
    DIST_CHECK_ARG(kind == Kind::kTensor || kind == Kind::kOptionalTensor, "TorchScript module ",
                   who(model), ": argument ", i + 1, " '", argument.name(), ": ",
                   argument.type()->annotation_str(),
                   "' cannot take a tensor by position; pass the inputs by name (NamedTensors)");
    stack.push_back(inputs[i]);
  }
  return stack;
}

// Runs the forward on bound arguments (the Method supplies self).
c10::IValue run(const TorchScriptModuleImpl& model, std::vector<c10::IValue> stack) {
  return model.script().get_method("forward")(std::move(stack));
}

// A result for the check's description: each tensor of a tuple or dict with its shape.
std::string describe_result(const c10::IValue& output) {
  if (!output.isTuple() && !output.isGenericDict()) return describe_value(output);
  std::ostringstream out;
  out << (output.isTuple() ? "a tuple of " : "a dict of ");
  const auto count =
      output.isTuple() ? output.toTupleRef().elements().size() : output.toGenericDict().size();
  out << count << " (";
  bool first = true;
  auto add = [&](const std::string& name, const c10::IValue& value) {
    out << (first ? "" : ", ") << name << " = " << describe_value(value);
    first = false;
  };
  if (output.isTuple()) {
    const auto& elements = output.toTupleRef().elements();
    for (size_t i = 0; i < elements.size(); ++i) add(std::to_string(i), elements[i]);
  } else {
    for (const auto& entry : output.toGenericDict())
      add(entry.key().isString() ? entry.key().toStringRef() : "?", entry.value());
  }
  out << ")";
  return out.str();
}

template <class Inputs>
ForwardReport check(TorchScriptModuleImpl& model, const Inputs& inputs) {
  const std::string called = detail::concat("TorchScript module ", who(model), " called with ",
                                            describe_inputs(schema_of(model), inputs));
  ForwardReport report;
  {
    ModeRestorer restore(model);
    model.eval();
    torch::NoGradGuard no_grad;
    std::vector<c10::IValue> stack;
    try {
      stack = bind_inputs(model, inputs);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(called + ": the inputs do not fit: " + e.what());
    }
    try {
      report.output = run(model, std::move(stack));
    } catch (const std::exception& e) {
      const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
      throw InvalidArgument(detail::concat(
          called,
          " raised: ", exception_line(c10_error ? c10_error->what_without_backtrace() : e.what()),
          "; give the module the inputs as it expects them (names, shapes, dtypes)"));
    }
  }
  report.description = called + "; it returned " + describe_result(report.output);
  try {
    report.outputs = output_tensors(report.output);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(report.description + ": " + e.what());
  }
  return report;
}

at::Tensor pick(const TorchScriptModuleImpl& model, const c10::IValue& result,
                const std::string& output) {
  if (output.empty()) {
    DIST_CHECK_ARG(result.isTensor(), "the forward of TorchScript module ", who(model),
                   " returned ", describe_value(result),
                   "; name the output to take (a tuple's index \"0\", a dict's key)");
    return result.toTensor();
  }
  const NamedTensors outputs = output_tensors(result);
  const auto found = outputs.find(output);
  DIST_CHECK_ARG(found != outputs.end(), "the forward of TorchScript module ", who(model),
                 " returned ", describe_value(result), ", which has no output '", output,
                 "'; its outputs: ", names_of(outputs));
  return found->second;
}

}  // namespace

std::string ForwardSignature::to_string() const {
  std::ostringstream out;
  out << "forward(";
  for (size_t i = 0; i < arguments.size(); ++i)
    out << (i ? ", " : "") << arguments[i].name << ": " << arguments[i].type
        << (arguments[i].has_default ? " = ..." : "");
  out << ") -> " << returns;
  return out.str();
}

ForwardSignature forward_signature(const TorchScriptModuleImpl& model) {
  const c10::FunctionSchema& schema = schema_of(model);
  ForwardSignature signature;
  for (const auto& argument : arguments_of(schema))
    signature.arguments.push_back(
        {argument.name(), argument.type()->annotation_str(), argument.default_value().has_value()});
  if (schema.returns().size() == 1) {
    signature.returns = schema.returns()[0].type()->annotation_str();
  } else {
    std::string types;
    for (const auto& r : schema.returns())
      types += (types.empty() ? "" : ", ") + r.type()->annotation_str();
    signature.returns = "(" + types + ")";
  }
  return signature;
}

c10::IValue call_forward(TorchScriptModuleImpl& model, const NamedTensors& inputs) {
  return run(model, bind_inputs(model, inputs));
}

c10::IValue call_forward(TorchScriptModuleImpl& model, const std::vector<at::Tensor>& inputs) {
  return run(model, bind_inputs(model, inputs));
}

c10::IValue call_forward(TorchScriptModuleImpl& model, const data::Element& inputs) {
  if (inputs.has_names()) return call_forward(model, named_tensors(inputs));
  return call_forward(model, static_cast<const std::vector<at::Tensor>&>(inputs));
}

NamedTensors named_tensors(const data::Element& element) {
  DIST_CHECK_ARG(element.has_names(), "named_tensors: the element ", element.describe(),
                 " has no names, only positions; name its components (Element{{\"tokens\", "
                 "t}, ...}) or pass its tensors by position");
  NamedTensors named;
  for (size_t i = 0; i < element.size(); ++i) named.emplace(element.names()[i], element[i]);
  return named;
}

NamedTensors output_tensors(const c10::IValue& output) {
  NamedTensors outputs;
  if (output.isTensor()) {
    outputs.emplace("output", output.toTensor());
  } else if (output.isTuple()) {
    const auto& elements = output.toTupleRef().elements();
    for (size_t i = 0; i < elements.size(); ++i) {
      DIST_CHECK_ARG(elements[i].isTensor(), "a forward's result is ", describe_value(output),
                     ": element ", i,
                     " is not a tensor; return tensors, a tuple of tensors or "
                     "a Dict[str, Tensor]");
      outputs.emplace(std::to_string(i), elements[i].toTensor());
    }
  } else if (output.isGenericDict()) {
    for (const auto& entry : output.toGenericDict()) {
      DIST_CHECK_ARG(entry.key().isString() && entry.value().isTensor(), "a forward's result is ",
                     describe_value(output),
                     "; return tensors, a tuple of tensors or a Dict[str, Tensor]");
      outputs.emplace(entry.key().toStringRef(), entry.value().toTensor());
    }
  } else {
    throw InvalidArgument(detail::concat("a forward's result is ", describe_value(output),
                                         "; return a tensor, a tuple of tensors or a "
                                         "Dict[str, Tensor]"));
  }
  return outputs;
}

at::Tensor forward_tensor(TorchScriptModuleImpl& model, const NamedTensors& inputs,
                          const std::string& output) {
  return pick(model, call_forward(model, inputs), output);
}

at::Tensor forward_tensor(TorchScriptModuleImpl& model, const std::vector<at::Tensor>& inputs,
                          const std::string& output) {
  return pick(model, call_forward(model, inputs), output);
}

at::Tensor forward_tensor(TorchScriptModuleImpl& model, const data::Element& inputs,
                          const std::string& output) {
  return pick(model, call_forward(model, inputs), output);
}

ForwardReport check_forward(TorchScriptModuleImpl& model, const data::Element& inputs) {
  if (inputs.has_names()) return check(model, named_tensors(inputs));
  return check(model, static_cast<const std::vector<at::Tensor>&>(inputs));
}

ForwardReport check_forward(TorchScriptModuleImpl& model, const NamedTensors& inputs) {
  return check(model, inputs);
}

ForwardReport check_forward(TorchScriptModuleImpl& model, const std::vector<at::Tensor>& inputs) {
  return check(model, inputs);
}

}  // namespace dist::models
