#include "dist/models/channels_last.h"

#include "keras/channels_last.h"

namespace dist::models {

// The Keras layers (above the models) convert their convolutions' inputs the same way.
at::Tensor to_channels_last(const at::Tensor& x) { return keras::detail::to_channels_last(x); }

}  // namespace dist::models
