// Model::summary and parameter counts, in Keras' layout.
#include <iomanip>
#include <sstream>

#include "dist/keras/model.h"
#include "graph_module.h"

namespace dist::keras {
namespace {

struct Counts {
  int64_t trainable = 0, non_trainable = 0;
};

// Parameters are trainable; floating-point buffers (BatchNormalization's moving mean and
// variance) are Keras' non-trainable weights. The step counter is not a weight.
template <typename NumelOf>
Counts count(const torch::nn::Module* module, const NumelOf& numel_of) {
  Counts c;
  if (module == nullptr) return c;
  for (const auto& p : module->parameters()) c.trainable += numel_of(p);
  for (const auto& b : module->buffers())
    if (b.is_floating_point()) c.non_trainable += b.numel();
  return c;
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string cell(const std::string& text, size_t width) {
  std::string out = " " + text;
  if (out.size() + 1 < width)
    out.resize(width, ' ');
  else
    out += "  ";
  return out;
}

}  // namespace

int64_t Model::count_params() const {
  Counts c = count(module().get(), [this](const at::Tensor& p) { return weight_numel(p); });
  return c.trainable + c.non_trainable;
}

void Model::summary(std::ostream& out) const {
  const auto& module = dynamic_cast<const detail::GraphModuleImpl&>(*this->module());
  const detail::Graph& graph = module.graph();
  const auto numel_of = [this](const at::Tensor& p) { return weight_numel(p); };
  const bool functional = !graph.sequential;
  std::vector<size_t> widths =
      functional ? std::vector<size_t>{29, 26, 11, 32} : std::vector<size_t>{29, 26, 10};
  // Keras wraps long names; here the first column grows to fit them, keeping rows aligned.
  for (size_t st = 0; st < graph.steps.size(); ++st) {
    int layer = graph.steps[st].layer;
    std::string label = layer < 0 ? std::string("input (InputLayer)")
                                  : graph.layers[static_cast<size_t>(layer)]->name + " (" +
                                        graph.layers[static_cast<size_t>(layer)]->kind() + ")";
    widths[0] = std::max(widths[0], label.size() + 3);
  }
  size_t line_width = 0;
  for (size_t w : widths) line_width += w;

  auto step_name = [&](int step) {
    int layer = graph.steps[static_cast<size_t>(step)].layer;
    return layer < 0 ? std::string("input") : graph.layers[static_cast<size_t>(layer)]->name;
  };
  out << "Model: \"" << name() << "\"\n" << std::string(line_width, '_') << "\n";
  out << cell("Layer (type)", widths[0]) << cell("Output Shape", widths[1])
      << cell("Param #", widths[2]);
  if (functional) out << cell("Connected to", widths[3]);
  out << "\n" << std::string(line_width, '=') << "\n";
  std::vector<bool> shown(graph.layers.size(), false);
  for (size_t s = 0; s < graph.steps.size(); ++s) {
    const auto& step = graph.steps[s];
    if (step.layer < 0 && !functional) continue;  // Keras' Sequential shows no input row
    std::string type = step.layer < 0 ? "InputLayer" : graph.layers[step.layer]->kind();
    int64_t params = 0;
    if (step.layer >= 0 && !shown[static_cast<size_t>(step.layer)]) {
      shown[static_cast<size_t>(step.layer)] = true;
      Counts c = count(module.layer_module(static_cast<size_t>(step.layer)), numel_of);
      params = c.trainable + c.non_trainable;
    }
    out << cell(step_name(static_cast<int>(s)) + " (" + type + ")", widths[0])
        << cell(shape_to_string(step.shape), widths[1]) << cell(std::to_string(params), widths[2]);
    if (functional) {
      std::string inputs;
      for (int in : step.inputs) inputs += (inputs.empty() ? "" : ", ") + step_name(in);
      out << cell("[" + inputs + "]", widths[3]);
    }
    out << "\n";
  }
  Counts total = count(&module, numel_of);
  out << std::string(line_width, '=') << "\n"
      << "Total params: " << with_commas(total.trainable + total.non_trainable) << "\n"
      << "Trainable params: " << with_commas(total.trainable) << "\n"
      << "Non-trainable params: " << with_commas(total.non_trainable) << "\n"
      << std::string(line_width, '_') << "\n";
}

}  // namespace dist::keras
