// The forward check of a TorchScript classifier and the words its messages use
// (dist/models/torchscript_model.h, torchscript_describe.h).
#include <torch/csrc/autograd/grad_mode.h>

#include <sstream>
#include <string>

#include "dist/core/error.h"
#include "dist/models/torchscript_model.h"
#include "models/mode_restorer.h"
#include "models/torchscript_describe.h"

namespace dist::models {

std::string describe_file(const std::string& file) {
  return file.empty() ? std::string("(not loaded from a file)") : "'" + file + "'";
}

std::string describe_value(const c10::IValue& value) {
  std::ostringstream out;
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    out << "a tensor of shape " << t.sizes() << " and dtype " << t.scalar_type();
  } else if (value.isTuple() || value.isList()) {
    const auto elements =
        value.isTuple() ? value.toTupleRef().elements().vec() : value.toListRef().vec();
    out << (value.isTuple() ? "a tuple of " : "a list of ") << elements.size() << " (";
    for (size_t i = 0; i < elements.size(); ++i)
      out << (i ? ", " : "") << elements[i].type()->annotation_str();
    out << ")";
  } else if (value.isNone()) {
    out << "None";
  } else {
    out << "a value of type " << value.type()->annotation_str();
  }
  return out.str();
}

std::string first_line(const std::string& message) {
  const size_t start = message.find_first_not_of("\n ");  // TorchScript's may start with one
  if (start == std::string::npos) return message;
  const size_t end = message.find('\n', start);
  return message.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

std::string exception_line(const std::string& message) {
  if (message.find("TorchScript") == std::string::npos) return first_line(message);
  const size_t end = message.find_last_not_of("\n ");
  if (end == std::string::npos) return message;
  const size_t start = message.rfind('\n', end);
  return message.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start + 1));
}

namespace {

std::string message_of(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e))
    return c10_error->what_without_backtrace();
  return e.what();
}

}  // namespace

at::Tensor check_classifier_forward(TorchScriptModuleImpl& model, const at::Tensor& batch,
                                    int64_t classes) {
  const std::string file = describe_file(model.file());
  DIST_CHECK_ARG(batch.defined() && batch.dim() == 4 && batch.is_floating_point(),
                 "check_classifier_forward of ", file,
                 ": the sample must be a float image batch N x C x H x W, got ",
                 batch.defined() ? describe_value(batch) : std::string("an undefined tensor"));
  const int64_t n = batch.size(0);
  const std::string expected =
      detail::concat("expected float logits of shape [", n, ", ",
                     classes < 0 ? std::string("classes") : std::to_string(classes),
                     "] from a float batch of shape ", batch.sizes(), "; ");
  c10::IValue output;
  {
    ModeRestorer restore(model);
    model.eval();
    torch::NoGradGuard no_grad;
    torch::jit::Module script = model.script();  // a handle on the same module
    try {
      output = script.forward({batch});
    } catch (const std::exception& e) {
      throw InvalidArgument(detail::concat(
          "the forward of TorchScript module ", file, " failed: ", expected,
          "it raised: ", exception_line(message_of(e)),
          "; the module must take the batch as the data gives it (the channels, the image "
          "size, values in [0, 1])"));
    }
  }
  const std::string came = detail::concat("it returned ", describe_value(output));
  DIST_CHECK_ARG(output.isTensor(), "the forward of TorchScript module ", file, ": ", expected,
                 came, "; return the logits alone from forward");
  at::Tensor logits = output.toTensor();
  DIST_CHECK_ARG(logits.is_floating_point(), "the forward of TorchScript module ", file, ": ",
                 expected, came, "; return the logits, not class indices or labels");
  DIST_CHECK_ARG(logits.dim() == 2, "the forward of TorchScript module ", file, ": ", expected,
                 came, " (rank ", logits.dim(), " instead of 2: one row of logits per image)");
  DIST_CHECK_ARG(logits.size(0) == n, "the forward of TorchScript module ", file, ": ", expected,
                 came, " (", logits.size(0), " rows for ", n,
                 " images: one row per image, nothing reduced over the batch)");
  DIST_CHECK_ARG(classes < 0 || logits.size(1) == classes, "the forward of TorchScript module ",
                 file, ": ", expected, came, " (", logits.size(1), " classes instead of ", classes,
                 ": the data's labels go up to ", classes - 1, ")");
  return logits;
}

}  // namespace dist::models
