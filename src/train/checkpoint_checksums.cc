#include "train/checkpoint_checksums.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/crc32c.h"

namespace dist::detail {
std::string checkpoint_checksum_text(uint32_t crc) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", crc);
  return text;
}

std::string checkpoint_tensor_checksum(const at::Tensor& tensor) {
  at::Tensor c = tensor.contiguous();
  return checkpoint_checksum_text(
      crc32c(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size()));
}

std::string checkpoint_header_checksum(const CheckpointTensors& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  std::vector<CheckpointTensorHeader> headers;
  for (const auto& [name, t] : tensors) headers.push_back({name, t.scalar_type(), t.sizes().vec()});
  return checkpoint_header_checksum(headers, metadata);
}

std::string checkpoint_header_checksum(const std::vector<CheckpointTensorHeader>& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  // A canonical text rather than the header's bytes: a checksum inside the bytes it covers
  // would need patching in place, and this way the reader checks meaning, not whitespace.
  std::ostringstream text;
  for (const auto& t : tensors)
    text << t.name << '\0' << t.dtype << at::IntArrayRef(t.shape) << '\0';
  for (const auto& [key, value] : metadata)
    if (key != kCheckpointHeaderChecksum) text << key << '\0' << value << '\0';
  const std::string bytes = text.str();
  return checkpoint_checksum_text(crc32c(bytes.data(), bytes.size()));
}

void seal_checkpoint(CheckpointTensors& tensors, std::map<std::string, std::string>& metadata) {
  std::stable_sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    const bool a_empty = a.second.numel() == 0, b_empty = b.second.numel() == 0;
    if (a_empty != b_empty) return a_empty;
    return a_empty && a.first < b.first;
  });
  for (const auto& [name, t] : tensors)
    metadata[kCheckpointChecksumPrefix + name] = checkpoint_tensor_checksum(t);
  metadata[kCheckpointHeaderChecksum] = checkpoint_header_checksum(tensors, metadata);
}

}  // namespace dist::detail
