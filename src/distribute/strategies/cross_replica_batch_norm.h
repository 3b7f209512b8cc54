// Batch normalization over the global batch (Keras' BatchNormalization(synchronized=True),
// PyTorch's SyncBatchNorm): in training, inside a step of several replicas, the mean and
// variance of each channel are those of every replica's examples together, so N replicas
// normalize as one device does on the same global batch.
//
// One all-reduce per call in forward (each channel's sum and sum of squares, and the example
// count, in float64 so that E[x^2] - E[x]^2 keeps float32's precision) through
// ReplicaContext::all_reduce, which is differentiable: backward all-reduces the gradients of
// those sums, the reduction BatchNorm's backward needs across replicas. A replica with no
// examples takes part with zeros. The moving statistics are updated from the global ones
// (the variance unbiased by the global count), as one device updates them.
//
// Every replica must run the forward and the backward through it in the same order (a replica
// with no examples too): a replica that skips either leaves the others waiting in the
// collective until its timeout. Keras' fit and a loop that calls backward on every replica's
// loss inside strategy.run() do.
#pragma once

#include <ATen/core/Tensor.h>

namespace dist::detail {

// `x` is [N, C] or [N, C, ...]; weight and bias [C] (undefined: none); running_mean and
// running_var [C], updated in place in training with `momentum` (LibTorch's: the weight of
// the new batch). In training with one replica (or outside a step) the same arithmetic without
// the all-reduce; in evaluation at::batch_norm. InvalidArgument when the global batch holds one
// value per channel.
at::Tensor cross_replica_batch_norm(const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& bias, const at::Tensor& running_mean,
                                    const at::Tensor& running_var, bool training, double momentum,
                                    double eps);

}  // namespace dist::detail
