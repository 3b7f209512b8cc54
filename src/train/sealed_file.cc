// Reading a sealed checkpoint file, whole or in ranges (sealed_file.h).
#include "train/sealed_file.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "core/crc32c.h"
#include "train/checkpoint_checksums.h"

namespace dist::detail {
namespace {

// Bytes a tensor read in pieces passes through at a time: a multiple of every element size.
constexpr size_t kBytesPerPiece = size_t{4} << 20;

}  // namespace

std::string read_sealed_file(
    const SafetensorsReader& file,
    const std::function<TakeBytes(const SafetensorsReader::Entry&)>& passing,
    std::map<std::string, at::Tensor>& whole) {
  const auto& meta = file.metadata();
  auto header = meta.find(kCheckpointHeaderChecksum);
  if (header == meta.end()) return "the header checksum is missing";
  std::vector<CheckpointTensorHeader> headers;
  for (const auto& entry : file.entries())
    headers.push_back({entry.name, entry.dtype, entry.shape});
  if (header->second != checkpoint_header_checksum(headers, meta))
    return "the header checksum does not match: the header is damaged";
  for (const auto& entry : file.entries()) {
    auto crc = meta.find(kCheckpointChecksumPrefix + entry.name);
    if (crc == meta.end()) return "tensor '" + entry.name + "' has no checksum";
    std::string actual;
    if (TakeBytes take = passing(entry)) {
      uint32_t running = 0;
      file.read_in_pieces(entry, kBytesPerPiece,
                          [&](const char* bytes, size_t size, int64_t first) {
                            running = crc32c(bytes, size, running);
                            take(bytes, size, first);
                          });
      actual = checkpoint_checksum_text(running);
    } else {
      at::Tensor t = file.read(entry);
      actual = checkpoint_tensor_checksum(t);
      whole[entry.name] = std::move(t);
    }
    if (crc->second != actual)
      return "tensor '" + entry.name +
             "': its data does not match its checksum: the file is damaged";
  }
  return "";
}

void copy_range_elements(const char* bytes, size_t size, int64_t first, const ElementRange& range,
                         at::Tensor& range_values) {
  const auto element = static_cast<int64_t>(range_values.element_size());
  const int64_t last = first + static_cast<int64_t>(size) / element;
  const int64_t from = std::max(first, range.begin);
  const int64_t to = std::min(last, range.begin + range.count);
  if (from >= to) return;
  std::memcpy(static_cast<char*>(range_values.data_ptr()) + (from - range.begin) * element,
              bytes + (from - first) * element, static_cast<size_t>((to - from) * element));
}

std::string read_checked_tensors(const SafetensorsReader& file, const WantedRanges& wanted,
                                 CheckedTensors& out) {
  return read_sealed_file(
      file,
      [&](const SafetensorsReader::Entry& entry) -> TakeBytes {
        const auto range = wanted ? wanted(entry.name) : std::nullopt;
        if (!range || range->begin < 0 || range->count < 0 ||
            range->begin > entry.numel - range->count)
          return nullptr;  // whole: the reader's checks then name a tensor of the wrong shape
        at::Tensor& values = out.tensors[entry.name];
        values = at::empty({range->count}, at::TensorOptions().dtype(entry.dtype));
        out.whole_shapes[entry.name] = entry.shape;
        return [range = *range, &values](const char* bytes, size_t size, int64_t first) {
          copy_range_elements(bytes, size, first, range, values);
        };
      },
      out.tensors);
}

}  // namespace dist::detail
