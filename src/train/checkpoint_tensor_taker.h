// The tensors of a checkpoint being read (checkpoint_reading.cc), handed out one object at a
// time: each is checked against what will receive it as it is taken, and what is left at the
// end belongs to no object here. Private to src/train.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "train/sealed_file.h"

namespace dist::detail {

class TensorTaker {
 public:
  TensorTaker(std::string path, CheckedTensors tensors);

  // Tensor `name` of `object`; fail_reading unless it is there with `like`'s (or `sizes` and
  // `dtype`) shape and dtype, `what` ("model", "tensor") saying what it was written for.
  at::Tensor take(const std::string& object, const std::string& name, const at::Tensor& like,
                  const char* what);
  at::Tensor take(const std::string& object, const std::string& name, at::IntArrayRef sizes,
                  at::ScalarType dtype, const char* what);
  // Every tensor whose name starts with `prefix`, by the rest of its name.
  std::map<std::string, at::Tensor> take_all(const std::string& prefix);
  std::optional<at::Tensor> take_if_present(const std::string& name);
  // The tensors not taken so far.
  const std::map<std::string, at::Tensor>& left() const { return tensors_; }
  // Of the tensors whose names start with `prefix`, those read as a range: their whole shapes.
  std::map<std::string, std::vector<int64_t>> ranged_under(const std::string& prefix) const;
  // The shape of tensor `name` in the file: a tensor read as a range holds only that range.
  std::vector<int64_t> whole_shape(const std::string& name) const;

 private:
  std::string path_;
  std::map<std::string, at::Tensor> tensors_;
  std::map<std::string, std::vector<int64_t>> whole_shapes_;
};

}  // namespace dist::detail
