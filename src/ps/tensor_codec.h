// Tensors on the wire (rpc::Tensor): raw bytes with dtype and shape, checked on arrival.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

#include "ps/parameter_server.pb.h"

namespace dist::ps {

// A contiguous CPU copy of `tensor` as bytes. InvalidArgument for a dtype the wire lacks.
void encode_tensor(const at::Tensor& tensor, rpc::Tensor* out);
rpc::Tensor encode_tensor(const at::Tensor& tensor);

// A tensor that owns a copy of the message's bytes. DataError naming `what` (the variable or
// argument) when the dtype is unknown, a dimension is negative, the element count overflows,
// or the byte count does not match the shape.
at::Tensor decode_tensor(const rpc::Tensor& message, const std::string& what);

// Bytes of tensor data a message carries (for the tests that count what crosses the wire).
int64_t payload_bytes(const rpc::Tensor& message);

}  // namespace dist::ps
