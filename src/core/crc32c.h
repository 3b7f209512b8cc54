// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by checkpoints (a checksum per
// tensor and for the header) and by TensorBoard's TFRecord framing.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dist {

// CRC-32C of `size` bytes, continuing from `crc` (0 to start), so
//   crc32c(b, m, crc32c(a, n)) == crc32c(a ++ b, n + m).
// Uses the SSE4.2 instruction where the CPU has it.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// TFRecord's checksum (TensorBoard event files, TFRecord data files): the CRC-32C rotated right
// by 15 bits plus 0xa282ead8, so that the CRC of data that itself holds CRCs is not trivially
// related to them.
uint32_t masked_crc32c(const void* data, size_t size);

namespace detail {
// The table-driven version used where SSE4.2 is missing (exposed to test it everywhere).
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc = 0);
}  // namespace detail

}  // namespace dist
