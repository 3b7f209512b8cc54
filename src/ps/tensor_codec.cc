#include "ps/tensor_codec.h"

#include <cstring>
#include <limits>

#include <ATen/ATen.h>

#include "dist/core/error.h"

namespace dist::ps {
namespace {

rpc::Tensor::DType wire_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return rpc::Tensor::FLOAT32;
    case at::kDouble:
      return rpc::Tensor::FLOAT64;
    case at::kLong:
      return rpc::Tensor::INT64;
    case at::kInt:
      return rpc::Tensor::INT32;
    case at::kBFloat16:
      return rpc::Tensor::BFLOAT16;
    default:
      throw InvalidArgument(detail::concat("parameter server: tensors of dtype ", type,
                                           " cannot be sent; use float32, float64, bfloat16, "
                                           "int64 or int32"));
  }
}

}  // namespace

void encode_tensor(const at::Tensor& tensor, rpc::Tensor* out) {
  out->set_dtype(wire_dtype(tensor.scalar_type()));
  at::Tensor c = tensor.detach().to(at::kCPU).contiguous();
  out->clear_shape();
  for (int64_t d : c.sizes()) out->add_shape(d);
  out->set_data(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
}

rpc::Tensor encode_tensor(const at::Tensor& tensor) {
  rpc::Tensor out;
  encode_tensor(tensor, &out);
  return out;
}

at::Tensor decode_tensor(const rpc::Tensor& message, const std::string& what) {
  at::ScalarType type;
  switch (message.dtype()) {
    case rpc::Tensor::FLOAT32:
      type = at::kFloat;
      break;
    case rpc::Tensor::FLOAT64:
      type = at::kDouble;
      break;
    case rpc::Tensor::INT64:
      type = at::kLong;
      break;
    case rpc::Tensor::INT32:
      type = at::kInt;
      break;
    case rpc::Tensor::BFLOAT16:
      type = at::kBFloat16;
      break;
    default:
      throw DataError(detail::concat(what, ": unknown tensor dtype ",
                                     static_cast<int>(message.dtype()), " in the message"));
  }
  std::vector<int64_t> shape(message.shape().begin(), message.shape().end());
  const int64_t element = static_cast<int64_t>(c10::elementSize(type));
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) throw DataError(detail::concat(what, ": negative dimension ", d, " in the shape"));
    if (d != 0 && numel > std::numeric_limits<int64_t>::max() / element / d)
      throw DataError(detail::concat(what, ": shape ", at::IntArrayRef(shape), " is too large"));
    numel *= d;
  }
  const auto bytes = static_cast<int64_t>(message.data().size());
  if (bytes != numel * element)
    throw DataError(detail::concat(what, ": ", bytes, " bytes of data for shape ",
                                   at::IntArrayRef(shape), " of ", type, " (", numel * element,
                                   " expected)"));
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(type));
  if (bytes > 0) std::memcpy(out.data_ptr(), message.data().data(), static_cast<size_t>(bytes));
  return out;
}

int64_t payload_bytes(const rpc::Tensor& message) {
  return static_cast<int64_t>(message.data().size());
}

}  // namespace dist::ps
