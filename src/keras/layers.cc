// The Layer machinery of dist/keras/layers.h: Input, calling a layer on KerasTensors (shapes
// checked and weights shared), naming. The layers themselves are core_layers.cc,
// convolution_layers.cc, pooling_layers.cc, batch_normalization.cc, dropout.cc and
// image_layers.cc.
#include "dist/keras/layers.h"

#include <sstream>

#include "dist/core/error.h"
#include "keras/layer_checks.h"

namespace dist::keras {

std::string shape_to_string(const Shape& shape) {
  std::ostringstream out;
  out << "(None";
  for (int64_t d : shape) out << ", " << d;
  out << ")";
  return out.str();
}

KerasTensor Input(Shape shape) {
  for (int64_t d : shape)
    DIST_CHECK_ARG(d >= 1, "Input shape ", shape_to_string(shape),
                   " has a dimension below 1; give one example's shape without the batch axis");
  auto node = std::make_shared<detail::Node>();
  node->shape = std::move(shape);
  return KerasTensor(std::move(node));
}

KerasTensor Layer::operator()(const KerasTensor& input) const {
  return (*this)(std::vector<KerasTensor>{input});
}

KerasTensor Layer::operator()(const std::vector<KerasTensor>& inputs) const {
  const int arity = spec_->arity();
  DIST_CHECK_ARG(arity == 0 || static_cast<int>(inputs.size()) == arity,
                 detail::describe(kind(), name()), " takes ", arity, " input, got ", inputs.size());
  std::vector<Shape> shapes;
  auto node = std::make_shared<detail::Node>();
  for (const KerasTensor& t : inputs) {
    shapes.push_back(t.shape());
    node->inputs.push_back(t.node());
  }
  node->shape = spec_->output_shape(shapes, name());
  // Calling a layer again shares its weights, so it must see the same shapes.
  if (spec_->built_for.empty()) {
    spec_->built_for = shapes;
  } else {
    DIST_CHECK_ARG(spec_->built_for == shapes, detail::describe(kind(), name()),
                   " was first called on ", shape_to_string(spec_->built_for[0]), " and now on ",
                   shape_to_string(shapes[0]),
                   "; a layer called twice shares its weights, so use a new layer instead");
  }
  node->layer = spec_;
  return KerasTensor(std::move(node));
}

Layer& Layer::named(std::string name) {
  DIST_CHECK_ARG(!name.empty() && name.find('.') == std::string::npos, "layer name '", name,
                 "' must be non-empty and contain no '.'");
  spec_->name = std::move(name);
  return *this;
}

void Layer::check_not_built() const {
  DIST_CHECK_ARG(spec_->built_for.empty(), detail::describe(kind(), name()),
                 " has already been called; set its options before calling it");
}

}  // namespace dist::keras
