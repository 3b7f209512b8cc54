#include "train/checkpoint_checksums.h"

#include <cstdio>
#include <sstream>

#include "core/crc32c.h"

namespace dist::detail {
namespace {

std::string hex(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", value);
  return text;
}

}  // namespace

std::string checkpoint_tensor_checksum(const at::Tensor& tensor) {
  at::Tensor c = tensor.contiguous();
  return hex(crc32c(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size()));
}

std::string checkpoint_header_checksum(const CheckpointTensors& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  // A canonical text rather than the header's bytes: a checksum inside the bytes it covers
  // would need patching in place, and this way the reader checks meaning, not whitespace.
  std::ostringstream text;
  for (const auto& [name, t] : tensors)
    text << name << '\0' << t.scalar_type() << t.sizes() << '\0';
  for (const auto& [key, value] : metadata)
    if (key != kCheckpointHeaderChecksum) text << key << '\0' << value << '\0';
  const std::string bytes = text.str();
  return hex(crc32c(bytes.data(), bytes.size()));
}

void seal_checkpoint(const CheckpointTensors& tensors,
                     std::map<std::string, std::string>& metadata) {
  for (const auto& [name, t] : tensors)
    metadata[kCheckpointChecksumPrefix + name] = checkpoint_tensor_checksum(t);
  metadata[kCheckpointHeaderChecksum] = checkpoint_header_checksum(tensors, metadata);
}

std::string checkpoint_checksum_problem(const CheckpointTensors& tensors,
                                        const std::map<std::string, std::string>& metadata) {
  auto header = metadata.find(kCheckpointHeaderChecksum);
  if (header == metadata.end()) return "the header checksum is missing";
  if (header->second != checkpoint_header_checksum(tensors, metadata))
    return "the header checksum does not match: the header is damaged";
  for (const auto& [name, t] : tensors) {
    auto crc = metadata.find(kCheckpointChecksumPrefix + name);
    if (crc == metadata.end()) return "tensor '" + name + "' has no checksum";
    if (crc->second != checkpoint_tensor_checksum(t))
      return "tensor '" + name + "': its data does not match its checksum: the file is damaged";
  }
  return "";
}

}  // namespace dist::detail
