#include "dist/data/idx_reader.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <vector>

#include "data/sources/file_bytes.h"
#include "dist/core/error.h"

namespace dist::data {
namespace {

constexpr uint64_t kMagicBytes = 4;

struct IdxType {
  at::ScalarType dtype;
  const char* name;
};

// Returns false for a type code that IDX does not define.
bool idx_type(uint8_t code, IdxType* out) {
  switch (code) {
    case 0x08:
      *out = {at::kByte, "uint8"};
      return true;
    case 0x09:
      *out = {at::kChar, "int8"};
      return true;
    case 0x0B:
      *out = {at::kShort, "int16"};
      return true;
    case 0x0C:
      *out = {at::kInt, "int32"};
      return true;
    case 0x0D:
      *out = {at::kFloat, "float32"};
      return true;
    case 0x0E:
      *out = {at::kDouble, "float64"};
      return true;
    default:
      return false;
  }
}

uint32_t big_endian_u32(const unsigned char* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

std::string join_dims(const std::vector<int64_t>& dims) {
  std::ostringstream out;
  for (size_t i = 0; i < dims.size(); ++i) out << (i ? " x " : "") << dims[i];
  return out.str();
}

// Converts big-endian values of `width` bytes to host order, in place.
void big_endian_to_host(void* data, uint64_t count, size_t width) {
  if constexpr (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__) return;
  auto* bytes = static_cast<unsigned char*>(data);
  for (uint64_t i = 0; i < count; ++i) {
    unsigned char* v = bytes + i * width;
    for (size_t lo = 0, hi = width - 1; lo < hi; ++lo, --hi) std::swap(v[lo], v[hi]);
  }
}

// read_idx and read_idx_first: `max_items` < 0 reads the whole file.
at::Tensor read_idx_items(const std::string& path, int64_t max_items, Env* env) {
  detail::FileBytes in(path, env);
  DIST_CHECK(in.file_size() > 0, DataError, path, " is empty (0 bytes); expected an IDX file");

  unsigned char magic[kMagicBytes];
  in.read_exact(magic, kMagicBytes, "IDX magic number");
  DIST_CHECK(magic[0] == 0 && magic[1] == 0, DataError, path,
             " has a wrong magic number: ", "its first two bytes are ", int{magic[0]}, " and ",
             int{magic[1]}, " but an IDX file starts with two zero bytes; it is not an IDX file");
  IdxType type{};
  DIST_CHECK(idx_type(magic[2], &type), DataError, path, " has an unknown IDX type code ",
             int{magic[2]}, " (byte 2); known codes are 8 (uint8), 9 (int8), 11 (int16), ",
             "12 (int32), 13 (float32) and 14 (float64)");
  const int rank = magic[3];
  DIST_CHECK(rank >= 1 && rank <= kMaxIdxDims, DataError, path, " has ",
             rank == 0 ? "zero dims" : "too many dims", " in its IDX header (", rank,
             "); this reader accepts 1 to ", kMaxIdxDims);

  std::vector<unsigned char> raw_dims(4 * static_cast<size_t>(rank));
  in.read_exact(raw_dims.data(), raw_dims.size(), "IDX dimensions");
  std::vector<int64_t> dims(rank);
  const uint64_t width = at::elementSize(type.dtype);
  // The tensor's byte count must fit int64 (LibTorch sizes are signed); keep to that. A zero dim
  // counts as 1: LibTorch multiplies every dim (and derives strides from them) even for an empty
  // tensor, and throws c10::Error for shapes like 0 x 2^31 x 2^31 x 2^31.
  constexpr uint64_t kLimit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t extent = width;
  bool overflow = false;
  for (int i = 0; i < rank; ++i) {
    dims[i] = big_endian_u32(&raw_dims[4 * i]);
    const uint64_t d = std::max<uint64_t>(static_cast<uint64_t>(dims[i]), 1);
    overflow = overflow || __builtin_mul_overflow(extent, d, &extent) || extent > kLimit;
  }
  DIST_CHECK(!overflow, DataError, path, " has a corrupt IDX header: its dims ", join_dims(dims),
             " of ", type.name, " overflow a 64-bit byte count");
  const bool empty = std::find(dims.begin(), dims.end(), 0) != dims.end();
  const uint64_t data_bytes = empty ? 0 : extent;

  const uint64_t header_bytes = kMagicBytes + raw_dims.size();
  in.check_size(header_bytes + data_bytes,
                ::dist::detail::concat("its IDX header describes ", join_dims(dims), " ", type.name,
                                       " values"));
  const bool whole = max_items < 0 || max_items >= dims[0];
  // Each item's bytes: the data's divided by the first dim (not 0 unless the data is empty).
  const uint64_t read_bytes =
      whole || data_bytes == 0
          ? data_bytes
          : data_bytes / static_cast<uint64_t>(dims[0]) * static_cast<uint64_t>(max_items);
  if (!whole) dims[0] = max_items;
  at::Tensor tensor = at::empty(dims, at::TensorOptions().dtype(type.dtype));
  in.read_exact(tensor.data_ptr(), read_bytes, "IDX data");
  if (whole) in.expect_end();
  if (width > 1) big_endian_to_host(tensor.data_ptr(), read_bytes / width, width);
  return tensor;
}

}  // namespace

at::Tensor read_idx(const std::string& path, Env* env) { return read_idx_items(path, -1, env); }

at::Tensor read_idx_first(const std::string& path, int64_t max_items, Env* env) {
  DIST_CHECK_ARG(max_items >= 0, "read_idx_first: max_items is ", max_items, " for ", path,
                 "; it must be at least 0");
  return read_idx_items(path, max_items, env);
}

}  // namespace dist::data
