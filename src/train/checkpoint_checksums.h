// The checksums a checkpoint file carries in its metadata (see dist/train/checkpoint.h): one
// CRC-32C per tensor ("crc32c/<tensor>") and "header_crc32c" over every other header entry.
// One definition for the writer, the reader, and the tests and fuzz targets that edit a file
// and seal it again (a drift between two copies would only show as lost fuzz coverage).
#pragma once

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

// Over every header entry but the header checksum itself: names, dtypes, shapes (the offsets
// follow from them; the reader checks the tiling) and the metadata, in a fixed order.
std::string checkpoint_header_checksum(const CheckpointTensors& tensors,
                                       const std::map<std::string, std::string>& metadata);

// Sets every tensor's checksum, then the header checksum, in `metadata`.
void seal_checkpoint(const CheckpointTensors& tensors,
                     std::map<std::string, std::string>& metadata);

// What is wrong with a sealed file's checksums (a missing or differing header checksum, a
// tensor without a checksum or whose data differs from it), or empty when they hold.
std::string checkpoint_checksum_problem(const CheckpointTensors& tensors,
                                        const std::map<std::string, std::string>& metadata);

}  // namespace dist::detail
