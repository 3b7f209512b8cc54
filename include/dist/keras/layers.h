// Keras layers over LibTorch modules, for building a dist::keras::Model.
//
//   using namespace dist::keras;
//   KerasTensor inputs = Input({3, 32, 32});
//   KerasTensor x = layers::Conv2D(16, 3).padding("same").use_bias(false)(inputs);
//   x = layers::BatchNormalization()(x);
//   x = layers::ReLU()(x);
//   KerasTensor y = layers::Conv2D(16, 3).padding("same")(x);
//   x = layers::Add()({x, y});                          // a residual connection
//   KerasTensor outputs = layers::Dense(10)(layers::GlobalAveragePooling2D()(x));
//   Model model(inputs, outputs, "resnet");
//
// Shapes are per example (no batch axis) and channels first, as LibTorch's convolutions want
// them: a 28x28 grey image is {1, 28, 28}, not Keras' (28, 28, 1). Calling a layer on a
// KerasTensor checks the input shape at once and names the layer when it does not fit.
//
// Weights start as LibTorch's modules start them (Linear's and Conv2d's default initializers),
// so a model built here from the same seed starts from the same weights as the equivalent
// torch::nn::Sequential. BatchNormalization takes Keras' defaults (momentum 0.99, epsilon 1e-3).
//
// A Layer is a handle: copies share one layer, and calling one layer twice in a model shares its
// weights. Unlike Keras, two Models never share weights: each makes its own from the layers
// (a sub-model of a trained model is not trained with it). Set options (padding, activation,
// ...) before the first call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace dist::keras {

// One example's shape: no batch axis, channels first.
using Shape = std::vector<int64_t>;

// "(None, 32, 26, 26)": the shape with Keras' batch axis, as summary() prints it.
std::string shape_to_string(const Shape& shape);

namespace detail {

// What a layer is: its options, how it checks and maps shapes, the LibTorch module it owns and
// how it computes. Subclassed once per layer type (src/keras/layers.cc).
class LayerSpec {
 public:
  explicit LayerSpec(std::string kind) : kind_(std::move(kind)) {}
  virtual ~LayerSpec() = default;

  // "Conv2D", "Dense", ...
  const std::string& kind() const { return kind_; }
  // The Keras default name stem: "conv2d", "dense", "batch_normalization", ...
  virtual std::string default_name() const = 0;
  // Accepted number of inputs: 1, or 0 for "two or more" (Add).
  virtual int arity() const { return 1; }
  // The output shape for these inputs; InvalidArgument naming `name` when they do not fit.
  virtual Shape output_shape(const std::vector<Shape>& inputs, const std::string& name) const = 0;
  // A new LibTorch module holding the layer's weights for these inputs, or nullptr for layers
  // without weights or state.
  virtual std::shared_ptr<torch::nn::Module> make_module(const std::vector<Shape>& inputs) const {
    (void)inputs;
    return nullptr;
  }
  // The layer's output. `module` is what make_module made (nullptr when it made none).
  virtual at::Tensor call(torch::nn::Module* module, const std::vector<at::Tensor>& inputs,
                          bool training) const = 0;

  std::string name;              // set by the user, or by the Model ("" until then)
  std::vector<Shape> built_for;  // input shapes of the first call (empty: not called)

 private:
  std::string kind_;
};

// One step of a model's graph: a layer applied to earlier nodes, or an Input.
struct Node {
  std::shared_ptr<LayerSpec> layer;  // nullptr for an Input
  std::vector<std::shared_ptr<const Node>> inputs;
  Shape shape;  // the output shape
};

}  // namespace detail

// A symbolic tensor: an Input, or a layer's output while a model is being defined.
class KerasTensor {
 public:
  explicit KerasTensor(std::shared_ptr<const detail::Node> node) : node_(std::move(node)) {}
  const Shape& shape() const { return node_->shape; }
  const std::shared_ptr<const detail::Node>& node() const { return node_; }

 private:
  std::shared_ptr<const detail::Node> node_;
};

// The model's input: one example's shape, without the batch axis (keras.Input(shape=...)).
KerasTensor Input(Shape shape);

class Layer {
 public:
  // Applies the layer, checking the shapes now (InvalidArgument names the layer).
  KerasTensor operator()(const KerasTensor& input) const;
  KerasTensor operator()(const std::vector<KerasTensor>& inputs) const;

  // Names the layer (weights are then "<name>.weight", ...); unique within a model. Unnamed
  // layers get Keras' names when the model is made: "conv2d", "conv2d_1", ...
  Layer& named(std::string name);
  const std::string& name() const { return spec_->name; }
  const std::string& kind() const { return spec_->kind(); }
  const std::shared_ptr<detail::LayerSpec>& spec() const { return spec_; }

 protected:
  explicit Layer(std::shared_ptr<detail::LayerSpec> spec) : spec_(std::move(spec)) {}
  // The spec, for an option setter; InvalidArgument once the layer has been called.
  template <class Spec>
  Spec& options_of() const {
    check_not_built();
    return static_cast<Spec&>(*spec_);
  }

 private:
  void check_not_built() const;
  std::shared_ptr<detail::LayerSpec> spec_;
};

namespace layers {

// 2-D convolution over [C, H, W] inputs. padding "valid" (none) or "same" (output size
// ceil(input / strides), padded as TensorFlow pads: the extra row and column at the end).
// activation: "" (none), "relu", "sigmoid", "tanh" or "softmax" (over channels).
class Conv2D : public Layer {
 public:
  Conv2D(int64_t filters, int64_t kernel_size);
  Conv2D& strides(int64_t strides);
  Conv2D& padding(const std::string& padding);
  Conv2D& activation(const std::string& activation);
  Conv2D& use_bias(bool use_bias);
};

// Fully connected layer over the last axis. activation as for Conv2D ("softmax": last axis).
class Dense : public Layer {
 public:
  explicit Dense(int64_t units, const std::string& activation = "");
  Dense& use_bias(bool use_bias);
};

// Max over pool_size x pool_size windows, stepping by strides (default pool_size); "valid" or
// "same" padding as for Conv2D.
class MaxPooling2D : public Layer {
 public:
  explicit MaxPooling2D(int64_t pool_size = 2);
  MaxPooling2D& strides(int64_t strides);
  MaxPooling2D& padding(const std::string& padding);
};

// Batch normalization over the channel axis (axis 0 of the example: [C] or [C, H, W]).
// In training, each replica normalizes with its own batch's statistics (as Keras does without
// synchronized batch norm); the moving statistics are averaged over every replica (and, under
// MultiWorkerMirroredStrategy, every worker) after each step.
class BatchNormalization : public Layer {
 public:
  BatchNormalization();
  // Keras' momentum: moving = moving * momentum + batch * (1 - momentum).
  BatchNormalization& momentum(double momentum);
  BatchNormalization& epsilon(double epsilon);
  // Keras' synchronized=True: in training, the mean and variance over the global batch of
  // every replica of every worker (one all-reduce per call in forward, one in backward), so N
  // replicas normalize as one device does on the same global batch. Off (the default), each
  // replica normalizes its own slice with its own statistics, and the moving statistics are
  // averaged across replicas after each step: N replicas then differ from one device. Under
  // ParameterServerStrategy a step is one worker's batch, whose statistics it uses either way
  // (worker-local, with a warning on stderr once per process: workers step independently).
  BatchNormalization& synchronized(bool synchronized);
};

// Flattens each example to one axis.
class Flatten : public Layer {
 public:
  Flatten();
};

class ReLU : public Layer {
 public:
  ReLU();
};

// Element-wise sum of two or more inputs of the same shape.
class Add : public Layer {
 public:
  Add();
};

// Mean over H and W of [C, H, W]: gives [C].
class GlobalAveragePooling2D : public Layer {
 public:
  GlobalAveragePooling2D();
};

// Zeroes each element with probability `rate` in training and scales the rest by
// 1 / (1 - rate); the identity in evaluation and prediction.
//
// Reproducible: the mask is a function of the seed, the layer's count of training calls, each
// example's place in the step's global batch and the element's place in the example, so one
// global batch gets the same mask with 1, 2 or 7 replicas, and two runs with the same seed get
// the same masks. The count is a buffer of the layer's module ("<name>.calls", int64): a
// checkpoint saves it, so a resumed run continues the sequence. Inside strategy.run() with
// several replicas the batch must come from a distributed dataset (the replica needs the
// global batch size to place its share), and the model must be called on the replica's own
// share; otherwise InvalidArgument says so. The global random generator is not used.
class Dropout : public Layer {
 public:
  explicit Dropout(double rate);
  // The masks' seed; default 0, so runs are reproducible unless seeded differently. Give each
  // Dropout of a model its own seed, or layers of one shape drop the same elements.
  Dropout& seed(uint64_t seed);
};

// Transposed 2-D convolution over [C, H, W] (a "deconvolution": the gradient of Conv2D with
// respect to its input), for up-sampling. Output size per spatial axis, as Keras gives it:
// "same": input * strides; "valid": input * strides + max(kernel_size - strides, 0), which is
// (input - 1) * strides + kernel_size when kernel_size >= strides. "same" places the output
// exactly as TensorFlow's conv2d_transpose does (when the implied padding is odd, the extra row
// and column are cut at the end). activation as for Conv2D (softmax over channels). Weights
// start as LibTorch's ConvTranspose2d starts them; the weight is [in, filters, k, k].
class Conv2DTranspose : public Layer {
 public:
  Conv2DTranspose(int64_t filters, int64_t kernel_size);
  Conv2DTranspose& strides(int64_t strides);             // default 1
  Conv2DTranspose& padding(const std::string& padding);  // "valid" (default) or "same"
  Conv2DTranspose& activation(const std::string& activation);
  Conv2DTranspose& use_bias(bool use_bias);  // default true
};

// max(x, 0) + alpha * min(x, 0), element-wise; alpha >= 0 (Keras' default 0.3).
class LeakyReLU : public Layer {
 public:
  explicit LeakyReLU(double alpha = 0.3);
};

// Instance normalization (tensorflow_addons' InstanceNormalization): each example's channel is
// normalized by its own mean and (biased) variance over the spatial axes, then scaled by gamma
// and shifted by beta, learned per channel (weights "<name>.gamma", ones, and "<name>.beta",
// zeros). Takes [C, H, W] (or [C, spatial...]); no moving statistics, so training and
// inference compute the same.
class InstanceNormalization : public Layer {
 public:
  InstanceNormalization();
  InstanceNormalization& epsilon(double epsilon);  // added to the variance; default 1e-3
  InstanceNormalization& center(bool center);      // learn beta; default true
  InstanceNormalization& scale(bool scale);        // learn gamma; default true
};

// Joins two or more inputs along `axis` of the example shape (no batch axis: for [C, H, W],
// axis 0 joins channels, as a U-Net's skip connections do). Negative axes count from the end.
// The shapes must agree on every other axis.
class Concatenate : public Layer {
 public:
  explicit Concatenate(int64_t axis = 0);
};

// An activation as a layer: "tanh", "sigmoid", "relu", "softmax" (over channels for [C, H, W]
// examples, over the last axis otherwise) or "linear" (the identity).
class Activation : public Layer {
 public:
  explicit Activation(const std::string& activation);
};

// Adds rows and columns of zeros around [C, H, W] images.
class ZeroPadding2D : public Layer {
 public:
  // `padding` on every side.
  explicit ZeroPadding2D(int64_t padding = 1);
  // {{top, bottom}, {left, right}}.
  explicit ZeroPadding2D(
      const std::pair<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>>& padding);
};

}  // namespace layers
}  // namespace dist::keras
