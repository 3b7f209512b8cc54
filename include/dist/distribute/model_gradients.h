// Gradients of a loss with respect to one model only, for steps that train several models
// (a GAN's generators and discriminators), as TensorFlow's
// tape.gradient(loss, model.trainable_variables) followed by optimizer.apply_gradients.
//
//   auto gen_loss = adversarial(disc_y(fake_y)) + cycle + identity;   // reaches disc_y too
//   auto disc_loss = ...;
//   dist::backward(gen_loss, gen_g);      // gen_g's gradients only; disc_y's are untouched
//   dist::backward(disc_loss, disc_y);    // disc_y's gradients only
//   gen_g_optimizer->apply_gradients();
//   disc_y_optimizer->apply_gradients();
//
// A plain loss.backward() accumulates into every parameter the loss reaches: a generator's
// loss would add to the discriminator's gradients, and under MultiWorkerMirroredStrategy (whose
// gradient reduction starts during backward) the discriminator's second gradient in one step
// is an error. backward(loss, model) runs autograd for the calling replica's copy of `model`
// only, so each model's reduction still overlaps the backward pass that produces its
// gradients, and every other model's gradients stay as they were.
//
// Inside strategy.run() it uses the calling replica's copy; outside, the primary module. The
// graph is kept (retain_graph) by default, so several models' gradients can come from one
// forward pass, as with TensorFlow's persistent tape; it is freed with the loss tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include "dist/distribute/distributed_variables.h"
#include "dist/distribute/mirrored.h"

namespace dist {

struct BackwardOptions {
  // Keep the graph for more backward passes from the same forward pass.
  bool retain_graph = true;
};

// Accumulates d(loss)/d(variable) into the gradient of every trainable variable of the
// calling replica's copy of `model`, and of no other tensor. `loss` must be a scalar.
// InvalidArgument when it is not, or when it does not depend on any of the model's variables.
void backward(const at::Tensor& loss, const DistributedVariables& model,
              const BackwardOptions& options = {});

template <class M>
void backward(const at::Tensor& loss, const Mirrored<M>& model,
              const BackwardOptions& options = {}) {
  backward(loss, model.variables(), options);
}

}  // namespace dist
