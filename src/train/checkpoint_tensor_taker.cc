#include "train/checkpoint_tensor_taker.h"

#include "dist/core/error.h"
#include "train/checkpoint_format.h"

namespace dist::detail {

TensorTaker::TensorTaker(std::string path, CheckedTensors tensors)
    : path_(std::move(path)),
      tensors_(std::move(tensors.tensors)),
      whole_shapes_(std::move(tensors.whole_shapes)) {}

at::Tensor TensorTaker::take(const std::string& object, const std::string& name,
                             const at::Tensor& like, const char* what) {
  return take(object, name, like.sizes(), like.scalar_type(), what);
}

at::Tensor TensorTaker::take(const std::string& object, const std::string& name,
                             at::IntArrayRef sizes, at::ScalarType dtype, const char* what) {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    fail_reading(path_, "object '" + object + "': tensor '" + name +
                            "' is missing; was it written for a different " + what + "?");
  const auto shape = whole_shape(name);
  if (at::IntArrayRef(shape) != sizes || it->second.scalar_type() != dtype)
    fail_reading(
        path_, concat("object '", object, "': tensor '", name, "' is ", at::IntArrayRef(shape), " ",
                      it->second.scalar_type(), " but the ", what, " has ", sizes, " ", dtype));
  at::Tensor t = it->second;
  tensors_.erase(it);
  return t;
}

std::map<std::string, at::Tensor> TensorTaker::take_all(const std::string& prefix) {
  std::map<std::string, at::Tensor> taken;
  for (auto it = tensors_.lower_bound(prefix);
       it != tensors_.end() && starts_with(it->first, prefix);) {
    taken[it->first.substr(prefix.size())] = it->second;
    it = tensors_.erase(it);
  }
  return taken;
}

std::optional<at::Tensor> TensorTaker::take_if_present(const std::string& name) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  at::Tensor t = it->second;
  tensors_.erase(it);
  return t;
}

std::map<std::string, std::vector<int64_t>> TensorTaker::ranged_under(
    const std::string& prefix) const {
  std::map<std::string, std::vector<int64_t>> found;
  for (auto it = whole_shapes_.lower_bound(prefix);
       it != whole_shapes_.end() && starts_with(it->first, prefix); ++it)
    found[it->first.substr(prefix.size())] = it->second;
  return found;
}

std::vector<int64_t> TensorTaker::whole_shape(const std::string& name) const {
  auto ranged = whole_shapes_.find(name);
  if (ranged != whole_shapes_.end()) return ranged->second;
  auto it = tensors_.find(name);
  return it == tensors_.end() ? std::vector<int64_t>{} : it->second.sizes().vec();
}

}  // namespace dist::detail
