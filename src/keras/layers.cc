#include "dist/keras/layers.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <torch/nn/cloneable.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/padding.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "dist/core/error.h"
#include "dist/distribute/batch_split.h"
#include "dist/distribute/replica_context.h"
#include "dist/models/channels_last.h"
#include "distribute/strategies/cross_replica_batch_norm.h"
#include "image_layers.h"
#include "models/same_padding.h"

namespace dist::keras {

std::string shape_to_string(const Shape& shape) {
  std::ostringstream out;
  out << "(None";
  for (int64_t d : shape) out << ", " << d;
  out << ")";
  return out.str();
}

namespace detail {

namespace F = torch::nn::functional;

std::string describe(const std::string& kind, const std::string& name) {
  return kind + " layer" + (name.empty() ? "" : " '" + name + "'");
}

void check_activation(const std::string& activation) {
  DIST_CHECK_ARG(activation.empty() || activation == "linear" || activation == "relu" ||
                     activation == "sigmoid" || activation == "tanh" || activation == "softmax",
                 "unknown activation '", activation,
                 "': use relu, sigmoid, tanh, softmax, or \"\" for none");
}

// Softmax runs over the feature axis: channels (dim 1) for images, the last axis otherwise.
at::Tensor activate(const at::Tensor& x, const std::string& activation, int64_t feature_dim) {
  if (activation.empty() || activation == "linear") return x;
  if (activation == "relu") return torch::relu(x);
  if (activation == "sigmoid") return torch::sigmoid(x);
  if (activation == "tanh") return torch::tanh(x);
  return torch::softmax(x, feature_dim);
}

void check_padding(const std::string& padding) {
  DIST_CHECK_ARG(padding == "valid" || padding == "same", "unknown padding '", padding,
                 "': use \"valid\" or \"same\"");
}

void check_image(const std::vector<Shape>& inputs, const std::string& what) {
  DIST_CHECK_ARG(inputs[0].size() == 3, what,
                 " expects one example of shape (channels, height, "
                 "width), got ",
                 shape_to_string(inputs[0]),
                 "; images are channels first here, e.g. Input({1, 28, 28})");
}

namespace {

// TensorFlow's window arithmetic: "valid" keeps whole windows, "same" gives ceil(in / stride)
// and pads the total shortfall with the smaller half first.
int64_t window_output(int64_t in, int64_t window, int64_t stride, const std::string& padding) {
  if (padding == "same") return (in + stride - 1) / stride;
  return in < window ? 0 : (in - window) / stride + 1;
}
using models::pad_same;  // "same" padding: models/same_padding.h

class Conv2DSpec : public LayerSpec {
 public:
  Conv2DSpec(int64_t filters, int64_t kernel)
      : LayerSpec("Conv2D"), filters(filters), kernel(kernel) {
    DIST_CHECK_ARG(filters >= 1 && kernel >= 1,
                   "Conv2D needs filters >= 1 and kernel_size >= 1, "
                   "got ",
                   filters, " and ", kernel);
  }
  std::string default_name() const override { return "conv2d"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string& n) const override {
    check_image(in, describe(kind(), n));
    int64_t h = window_output(in[0][1], kernel, strides, padding);
    int64_t w = window_output(in[0][2], kernel, strides, padding);
    DIST_CHECK_ARG(h >= 1 && w >= 1, describe(kind(), n), ": a ", kernel, "x", kernel,
                   " kernel does not fit input ", shape_to_string(in[0]),
                   " with padding \"valid\"; use a larger input or padding \"same\"");
    return {filters, h, w};
  }
  std::shared_ptr<torch::nn::Module> make_module(const std::vector<Shape>& in) const override {
    auto options =
        torch::nn::Conv2dOptions(in[0][0], filters, kernel).stride(strides).bias(use_bias);
    // Even "same" padding is the convolution's own zero padding: no padded copy of the input.
    if (symmetric_same()) options.padding(kernel / 2);
    return std::make_shared<torch::nn::Conv2dImpl>(options);
  }
  at::Tensor call(torch::nn::Module* m, const std::vector<at::Tensor>& x, bool) const override {
    at::Tensor input =
        padding == "same" && !symmetric_same() ? pad_same(x[0], kernel, strides, 0.0) : x[0];
    // Channels-last activations run 1.5x faster through oneDNN (dist/models/channels_last.h);
    // a view when the input already is channels-last, as every later layer's is.
    input = models::to_channels_last(input);
    return activate(dynamic_cast<torch::nn::Conv2dImpl*>(m)->forward(input), activation, 1);
  }

  // Stride 1 with an odd kernel pads (kernel - 1) / 2 on every side.
  bool symmetric_same() const { return padding == "same" && strides == 1 && kernel % 2 == 1; }

  int64_t filters, kernel, strides = 1;
  std::string padding = "valid", activation;
  bool use_bias = true;
};

class DenseSpec : public LayerSpec {
 public:
  DenseSpec(int64_t units, std::string activation)
      : LayerSpec("Dense"), units(units), activation(std::move(activation)) {
    DIST_CHECK_ARG(units >= 1, "Dense needs units >= 1, got ", units);
    check_activation(this->activation);
  }
  std::string default_name() const override { return "dense"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string& n) const override {
    DIST_CHECK_ARG(!in[0].empty(), describe(kind(), n),
                   " needs at least one axis per example, "
                   "got a scalar");
    Shape out = in[0];
    out.back() = units;
    return out;
  }
  std::shared_ptr<torch::nn::Module> make_module(const std::vector<Shape>& in) const override {
    return std::make_shared<torch::nn::LinearImpl>(
        torch::nn::LinearOptions(in[0].back(), units).bias(use_bias));
  }
  at::Tensor call(torch::nn::Module* m, const std::vector<at::Tensor>& x, bool) const override {
    return activate(dynamic_cast<torch::nn::LinearImpl*>(m)->forward(x[0]), activation, -1);
  }

  int64_t units;
  std::string activation;
  bool use_bias = true;
};

class MaxPooling2DSpec : public LayerSpec {
 public:
  explicit MaxPooling2DSpec(int64_t pool) : LayerSpec("MaxPooling2D"), pool(pool), strides(pool) {
    DIST_CHECK_ARG(pool >= 1, "MaxPooling2D needs pool_size >= 1, got ", pool);
  }
  std::string default_name() const override { return "max_pooling2d"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string& n) const override {
    check_image(in, describe(kind(), n));
    int64_t h = window_output(in[0][1], pool, strides, padding);
    int64_t w = window_output(in[0][2], pool, strides, padding);
    DIST_CHECK_ARG(h >= 1 && w >= 1, describe(kind(), n), ": a ", pool, "x", pool,
                   " window does not fit input ", shape_to_string(in[0]));
    return {in[0][0], h, w};
  }
  at::Tensor call(torch::nn::Module*, const std::vector<at::Tensor>& x, bool) const override {
    at::Tensor input = padding == "same" ? pad_same(x[0], pool, strides, -INFINITY) : x[0];
    return F::max_pool2d(input, F::MaxPool2dFuncOptions(pool).stride(strides));
  }

  int64_t pool, strides;
  std::string padding = "valid";
};

class BatchNormalizationSpec : public LayerSpec {
 public:
  BatchNormalizationSpec() : LayerSpec("BatchNormalization") {}
  std::string default_name() const override { return "batch_normalization"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string& n) const override {
    DIST_CHECK_ARG(in[0].size() == 1 || in[0].size() == 3, describe(kind(), n),
                   " normalizes (features) or (channels, height, width) examples, got ",
                   shape_to_string(in[0]));
    return in[0];
  }
  std::shared_ptr<torch::nn::Module> make_module(const std::vector<Shape>& in) const override {
    // LibTorch's momentum weighs the new batch: Keras' 0.99 is LibTorch's 0.01.
    auto options = torch::nn::BatchNormOptions(in[0][0]).momentum(1.0 - momentum).eps(epsilon);
    if (in[0].size() == 1) return std::make_shared<torch::nn::BatchNorm1dImpl>(options);
    return std::make_shared<torch::nn::BatchNorm2dImpl>(options);
  }
  at::Tensor call(torch::nn::Module* m, const std::vector<at::Tensor>& x, bool) const override {
    auto* bn2 = dynamic_cast<torch::nn::BatchNorm2dImpl*>(m);
    if (!synchronized) return bn2 ? bn2->forward(x[0]) : as_1d(m).forward(x[0]);
    return bn2 ? synchronized_forward(*bn2, x[0]) : synchronized_forward(as_1d(m), x[0]);
  }

  double momentum = 0.99, epsilon = 1e-3;
  bool synchronized = false;

 private:
  static torch::nn::BatchNorm1dImpl& as_1d(torch::nn::Module* m) {
    return *dynamic_cast<torch::nn::BatchNorm1dImpl*>(m);
  }
  // Statistics over the global batch (distribute/strategies/cross_replica_batch_norm.h); the module's own forward
  // otherwise, whose buffers and count it keeps the same way.
  template <typename BatchNorm>
  static at::Tensor synchronized_forward(BatchNorm& bn, const at::Tensor& x) {
    const bool training = bn.is_training();
    if (training) bn.num_batches_tracked.add_(1);
    return dist::detail::cross_replica_batch_norm(x, bn.weight, bn.bias, bn.running_mean,
                                                 bn.running_var, training,
                                                 bn.options.momentum().value(), bn.options.eps());
  }
};

class FlattenSpec : public LayerSpec {
 public:
  FlattenSpec() : LayerSpec("Flatten") {}
  std::string default_name() const override { return "flatten"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string&) const override {
    int64_t size = 1;
    for (int64_t d : in[0]) size *= d;
    return {size};
  }
  at::Tensor call(torch::nn::Module*, const std::vector<at::Tensor>& x, bool) const override {
    return x[0].flatten(1);
  }
};

class ReLUSpec : public LayerSpec {
 public:
  ReLUSpec() : LayerSpec("ReLU") {}
  std::string default_name() const override { return "re_lu"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string&) const override {
    return in[0];
  }
  at::Tensor call(torch::nn::Module*, const std::vector<at::Tensor>& x, bool) const override {
    return torch::relu(x[0]);
  }
};

class AddSpec : public LayerSpec {
 public:
  AddSpec() : LayerSpec("Add") {}
  std::string default_name() const override { return "add"; }
  int arity() const override { return 0; }
  Shape output_shape(const std::vector<Shape>& in, const std::string& n) const override {
    DIST_CHECK_ARG(in.size() >= 2, describe(kind(), n), " needs two or more inputs, got ",
                   in.size());
    for (const Shape& s : in)
      DIST_CHECK_ARG(s == in[0], describe(kind(), n), " needs inputs of one shape, got ",
                     shape_to_string(in[0]), " and ", shape_to_string(s));
    return in[0];
  }
  at::Tensor call(torch::nn::Module*, const std::vector<at::Tensor>& x, bool) const override {
    at::Tensor sum = x[0] + x[1];
    for (size_t i = 2; i < x.size(); ++i) sum = sum + x[i];
    return sum;
  }
};

class GlobalAveragePooling2DSpec : public LayerSpec {
 public:
  GlobalAveragePooling2DSpec() : LayerSpec("GlobalAveragePooling2D") {}
  std::string default_name() const override { return "global_average_pooling2d"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string& n) const override {
    check_image(in, describe(kind(), n));
    return {in[0][0]};
  }
  at::Tensor call(torch::nn::Module*, const std::vector<at::Tensor>& x, bool) const override {
    return x[0].mean({2, 3});
  }
};

// Reproducible dropout. F::dropout draws from the global generator, so a global batch split
// over replica threads gets different masks for each replica count (and thread timing), and a
// resumed run does not continue the sequence. Here each element's keep/drop is a pure function
// of (seed, calls, global example index, element index):
//   - `calls` counts the layer's training-mode forwards; it is a buffer of the layer's module,
//     so checkpoints save and restore it, and mirrored copies (each running forward once per
//     step) keep equal counts;
//   - the global example index is the example's place in the step's global batch: a replica's
//     share starts after the shares of the replicas before it (batch_split.h);
//   - the element index is the position within the example in logical (C, H, W) order, so the
//     mask does not depend on memory format.
// The bits come from splitmix64's finalizer applied to a counter: the call key, then a key per
// example, then one output per element. A plain loop over uint64_t (well-defined wrap-around)
// is one pass; the same with int64 tensor ops would take a dozen passes and temporaries.
class DropoutStateImpl : public torch::nn::Cloneable<DropoutStateImpl> {
 public:
  DropoutStateImpl() { reset(); }
  void reset() override { calls = register_buffer("calls", torch::zeros({}, torch::kLong)); }
  at::Tensor calls;  // training-mode forwards so far
};

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;  // 2^64 / golden ratio: splitmix64's step

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Where this replica's examples start in the step's global batch (0 outside strategy.run()).
int64_t first_global_example(int64_t local_batch, const std::string& layer) {
  const ReplicaContext* context = get_replica_context();
  if (context == nullptr || context->num_replicas_in_sync() == 1) return 0;
  const int replicas = context->num_replicas_in_sync();
  const int id = context->replica_id_in_sync_group();
  DIST_CHECK_ARG(context->global_batch_size() >= 0, layer, " runs in replica ", id, " of ",
                 replicas,
                 ", but the step's input did not come from a distributed dataset, so the replica "
                 "cannot tell where its examples sit in the global batch; reproducible Dropout "
                 "numbers examples by that place. Feed strategy.run() batches from "
                 "strategy.experimental_distribute_dataset() or "
                 "distribute_datasets_from_function()");
  const auto sizes = split_sizes(context->global_batch_size(), replicas);
  DIST_CHECK_ARG(local_batch == sizes[static_cast<size_t>(id)], layer, " got ", local_batch,
                 " examples in replica ", id, " of ", replicas,
                 ", but that replica's share of the ", context->global_batch_size(),
                 "-example global batch is ", sizes[static_cast<size_t>(id)],
                 "; reproducible Dropout numbers examples by their place in the global batch, so "
                 "call the model on the replica's own share, not on a concatenation or slice");
  return std::accumulate(sizes.begin(), sizes.begin() + id, int64_t{0});
}

// x * mask, the mask keeping each element with probability 1 - rate and scaling it by
// 1 / (1 - rate). Examples are numbered from `first_example`.
at::Tensor apply_mask(const at::Tensor& x, double rate, uint64_t seed, uint64_t call,
                      int64_t first_example) {
  const int64_t batch = x.size(0);
  const int64_t per_example = batch == 0 ? 0 : x.numel() / batch;
  at::Tensor mask = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  const uint64_t call_key = mix64(mix64(seed) ^ (call + 1) * kGolden);
  // Keep when the top 53 bits, as a fraction of 2^53, are at least `rate`.
  const auto threshold = static_cast<uint64_t>(std::ceil(rate * 9007199254740992.0));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "Dropout", [&] {
    const auto scale = static_cast<scalar_t>(1.0 / (1.0 - rate));
    scalar_t* out = mask.data_ptr<scalar_t>();
    auto fill_examples = [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const auto example = static_cast<uint64_t>(first_example + n);
        const uint64_t key = mix64(call_key + (example + 1) * kGolden);
        scalar_t* row = out + n * per_example;
        for (int64_t i = 0; i < per_example; ++i) {
          const uint64_t bits = mix64(key + static_cast<uint64_t>(i) * kGolden);
          row[i] = (bits >> 11) >= threshold ? scale : scalar_t(0);
        }
      }
    };
    // About 32k elements per task.
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(per_example, 1));
    at::parallel_for(0, batch, grain, fill_examples);
  });
  return x * mask;
}

class DropoutSpec : public LayerSpec {
 public:
  explicit DropoutSpec(double rate) : LayerSpec("Dropout"), rate(rate) {
    DIST_CHECK_ARG(rate >= 0 && rate < 1, "Dropout rate must be in [0, 1), got ", rate);
  }
  std::string default_name() const override { return "dropout"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string&) const override {
    return in[0];
  }
  std::shared_ptr<torch::nn::Module> make_module(const std::vector<Shape>&) const override {
    return std::make_shared<DropoutStateImpl>();
  }
  at::Tensor call(torch::nn::Module* m, const std::vector<at::Tensor>& x,
                  bool training) const override {
    if (!training) return x[0];
    auto* state = dynamic_cast<DropoutStateImpl*>(m);
    DIST_INTERNAL_ASSERT(state != nullptr, "Dropout's module is not a DropoutStateImpl");
    // Counted at rate 0 too, so that every Dropout counts the same steps.
    const int64_t first =
        rate == 0 ? 0 : first_global_example(x[0].size(0), describe(kind(), name));
    const auto call = static_cast<uint64_t>(state->calls.item<int64_t>());
    {
      torch::NoGradGuard no_grad;
      state->calls.add_(1);
    }
    if (rate == 0) return x[0];
    return apply_mask(x[0], rate, seed, call, first);
  }

  double rate;
  uint64_t seed = 0;
};

}  // namespace
}  // namespace detail

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

namespace layers {

using namespace detail;  // NOLINT: the specs are this file's own

Conv2D::Conv2D(int64_t filters, int64_t kernel_size)
    : Layer(std::make_shared<Conv2DSpec>(filters, kernel_size)) {}
Conv2D& Conv2D::strides(int64_t strides) {
  DIST_CHECK_ARG(strides >= 1, "Conv2D strides must be at least 1, got ", strides);
  options_of<Conv2DSpec>().strides = strides;
  return *this;
}
Conv2D& Conv2D::padding(const std::string& padding) {
  check_padding(padding);
  options_of<Conv2DSpec>().padding = padding;
  return *this;
}
Conv2D& Conv2D::activation(const std::string& activation) {
  check_activation(activation);
  options_of<Conv2DSpec>().activation = activation;
  return *this;
}
Conv2D& Conv2D::use_bias(bool use_bias) {
  options_of<Conv2DSpec>().use_bias = use_bias;
  return *this;
}

Dense::Dense(int64_t units, const std::string& activation)
    : Layer(std::make_shared<DenseSpec>(units, activation)) {}
Dense& Dense::use_bias(bool use_bias) {
  options_of<DenseSpec>().use_bias = use_bias;
  return *this;
}

MaxPooling2D::MaxPooling2D(int64_t pool_size)
    : Layer(std::make_shared<MaxPooling2DSpec>(pool_size)) {}
MaxPooling2D& MaxPooling2D::strides(int64_t strides) {
  DIST_CHECK_ARG(strides >= 1, "MaxPooling2D strides must be at least 1, got ", strides);
  options_of<MaxPooling2DSpec>().strides = strides;
  return *this;
}
MaxPooling2D& MaxPooling2D::padding(const std::string& padding) {
  check_padding(padding);
  options_of<MaxPooling2DSpec>().padding = padding;
  return *this;
}

BatchNormalization::BatchNormalization() : Layer(std::make_shared<BatchNormalizationSpec>()) {}
BatchNormalization& BatchNormalization::momentum(double momentum) {
  DIST_CHECK_ARG(momentum >= 0 && momentum <= 1,
                 "BatchNormalization momentum must be in [0, 1], "
                 "got ",
                 momentum);
  options_of<BatchNormalizationSpec>().momentum = momentum;
  return *this;
}
BatchNormalization& BatchNormalization::synchronized(bool synchronized) {
  options_of<BatchNormalizationSpec>().synchronized = synchronized;
  return *this;
}
BatchNormalization& BatchNormalization::epsilon(double epsilon) {
  DIST_CHECK_ARG(epsilon > 0, "BatchNormalization epsilon must be positive, got ", epsilon);
  options_of<BatchNormalizationSpec>().epsilon = epsilon;
  return *this;
}

Flatten::Flatten() : Layer(std::make_shared<FlattenSpec>()) {}
ReLU::ReLU() : Layer(std::make_shared<ReLUSpec>()) {}
Add::Add() : Layer(std::make_shared<AddSpec>()) {}
GlobalAveragePooling2D::GlobalAveragePooling2D()
    : Layer(std::make_shared<GlobalAveragePooling2DSpec>()) {}
Dropout::Dropout(double rate) : Layer(std::make_shared<DropoutSpec>(rate)) {}
Dropout& Dropout::seed(uint64_t seed) {
  options_of<DropoutSpec>().seed = seed;
  return *this;
}

}  // namespace layers
}  // namespace dist::keras
