// Channels-last (NHWC) activations for convolutions on CPU: why they pay is in
// dist/models/channels_last.h, whose ChannelsLast layer and to_channels_last are this function.
// Here, below the models, so that Keras' Conv2D uses it too. Private to the library.
#pragma once

#include <ATen/core/Tensor.h>

namespace dist::keras::detail {

// `x` [N, C, H, W] as a channels-last tensor (a view when it already is one or C == 1, else a
// copy); tensors of other ranks are returned unchanged.
at::Tensor to_channels_last(const at::Tensor& x);

}  // namespace dist::keras::detail
