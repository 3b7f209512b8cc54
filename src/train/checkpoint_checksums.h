// The checksums a checkpoint file carries in its metadata (see dist/train/checkpoint.h): one
// CRC-32C per tensor ("crc32c/<tensor>") and "header_crc32c" over every other header entry.
// One definition for the writer, the reader, and the tests and fuzz targets that edit a file
// and seal it again (a drift between two copies would only show as lost fuzz coverage).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace dist::detail {

using CheckpointTensors = std::vector<std::pair<std::string, at::Tensor>>;

inline constexpr char kCheckpointChecksumPrefix[] = "crc32c/";
inline constexpr char kCheckpointHeaderChecksum[] = "header_crc32c";

// A tensor's data checksum, as the 8 hex digits stored in the metadata.
std::string checkpoint_tensor_checksum(const at::Tensor& tensor);

// A checksum's text, 8 hex digits, of a CRC-32C computed elsewhere (a tensor read in pieces).
std::string checkpoint_checksum_text(uint32_t crc);

// What the header checksum covers of a tensor.
struct CheckpointTensorHeader {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
};

// Over every header entry but the header checksum itself: names, dtypes, shapes (the offsets
// follow from them; the reader checks the tiling) and the metadata, in a fixed order.
std::string checkpoint_header_checksum(const std::vector<CheckpointTensorHeader>& tensors,
                                       const std::map<std::string, std::string>& metadata);
std::string checkpoint_header_checksum(const CheckpointTensors& tensors,
                                       const std::map<std::string, std::string>& metadata);

// Orders `tensors` as a reader of the file finds them, then sets every tensor's checksum and
// the header checksum in `metadata`. A reader orders a file's tensors by their data offsets;
// empty tensors (a worker's share of a parameter smaller than the worker count) share an offset
// with a neighbour, and the header's order among them is by name: so they go first, by name.
void seal_checkpoint(CheckpointTensors& tensors, std::map<std::string, std::string>& metadata);

// A reader checks them as it reads (sealed_file.h: whole tensors or in pieces).

}  // namespace dist::detail
