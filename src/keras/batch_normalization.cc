// BatchNormalization (dist/keras/layers.h): LibTorch's batch norm with Keras' defaults, or,
// synchronized, statistics over the global batch of every replica
// (distribute/strategies/cross_replica_batch_norm.h).
#include <torch/nn/modules/batchnorm.h>

#include "dist/core/error.h"
#include "dist/keras/layers.h"
#include "distribute/strategies/cross_replica_batch_norm.h"
#include "keras/layer_checks.h"

namespace dist::keras {
namespace detail {
namespace {

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
  // Statistics over the global batch (distribute/strategies/cross_replica_batch_norm.h); the
  // module's own forward otherwise, whose buffers and count it keeps the same way.
  template <typename BatchNorm>
  static at::Tensor synchronized_forward(BatchNorm& bn, const at::Tensor& x) {
    const bool training = bn.is_training();
    if (training) bn.num_batches_tracked.add_(1);
    return dist::detail::cross_replica_batch_norm(x, bn.weight, bn.bias, bn.running_mean,
                                                  bn.running_var, training,
                                                  bn.options.momentum().value(), bn.options.eps());
  }
};

}  // namespace
}  // namespace detail

namespace layers {

using namespace detail;  // NOLINT: the specs are this file's own

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

}  // namespace layers
}  // namespace dist::keras
