// Reading the tensors of a sealed checkpoint file (a checkpoint's file or one of its pieces:
// checkpoint_checksums.h), each whole or only the range of its elements a reader keeps, checked
// against the file's checksums either way.
//
// A worker that keeps 1/N of every parameter and slot (Sharding::kParameters) reads only its
// ranges: a tensor it wants a range of passes through a buffer of a few MiB, which its checksum
// and the range's copy read on the way, so the worker never holds the tensor whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "train/safetensors_reader.h"

namespace dist::detail {

// A range of a tensor's flat elements.
struct ElementRange {
  int64_t begin = 0;
  int64_t count = 0;
};
// The range of a tensor a reader keeps, by the tensor's name in the checkpoint; nullopt: all of
// it.
using WantedRanges = std::function<std::optional<ElementRange>(const std::string& name)>;

// The tensors read: whole, or the wanted range of the whole tensor's elements (1-D).
struct CheckedTensors {
  std::map<std::string, at::Tensor> tensors;
  std::map<std::string, std::vector<int64_t>> whole_shapes;  // of those held as a range
};

// Takes a tensor's bytes as they pass: `size` bytes from element `first_element` of the tensor.
using TakeBytes = std::function<void(const char* bytes, size_t size, int64_t first_element)>;

// Checks `file`'s header checksum and the checksum of every tensor, which it reads whole into
// `whole`, or, where `passing(entry)` returns a TakeBytes, passes in bounded pieces to it.
// Returns what is wrong with the checksums, or empty when they hold.
std::string read_sealed_file(
    const SafetensorsReader& file,
    const std::function<TakeBytes(const SafetensorsReader::Entry&)>& passing,
    std::map<std::string, at::Tensor>& whole);

// Copies into `range_values` (the elements of `range` of a whole tensor, 1-D) those of them in
// `bytes`: `size` bytes of elements from element `first` of the whole tensor on.
void copy_range_elements(const char* bytes, size_t size, int64_t first, const ElementRange& range,
                         at::Tensor& range_values);

// Reads a checkpoint's file: a tensor whose range `wanted` names (and that holds the range) as
// that range, every other whole. Returns what read_sealed_file returns.
std::string read_checked_tensors(const SafetensorsReader& file, const WantedRanges& wanted,
                                 CheckedTensors& out);

}  // namespace dist::detail
