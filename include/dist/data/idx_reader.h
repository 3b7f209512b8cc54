// Reader for the IDX format of MNIST and Fashion-MNIST.
//
// An IDX file is a 4-byte magic number, one big-endian uint32 per dimension, then the values
// in row-major order, big-endian. The magic number is two zero bytes, a type code and the
// number of dimensions:
//   0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

#include "dist/core/env.h"

namespace dist::data {

// The most dimensions read_idx accepts. IDX allows 255, but no real data set uses more than
// a handful, so a larger count means a corrupt header.
constexpr int kMaxIdxDims = 8;

// Reads the IDX file at `path`, plain or gzip-compressed (detected by the gzip magic 1f 8b,
// whatever the file name). Returns a CPU tensor of the file's type and shape, in host byte
// order.
//
// Throws dist::DataError, naming the file and the problem, if the file is missing, empty,
// truncated, has trailing bytes, has a bad magic number, an unknown type code, zero or more
// than kMaxIdxDims dimensions, or dimensions whose product overflows a 64-bit byte count (a
// zero dim counts as 1 there: LibTorch refuses such shapes even when empty). Sizes claimed by
// the header are checked against the file's size (for gzip, the size in its trailer) before
// anything is allocated for them.
//
// The file is read through `env` (env.h): a read error or a file that shrank while read is a
// DataError naming it too.
at::Tensor read_idx(const std::string& path, Env* env = Env::Default());

// The first `max_items` entries along the first dimension (all when the file holds fewer): the
// same as read_idx(path, env).slice(0, 0, max_items), but only the header and those entries'
// bytes are read (and inflated), and the rest of the file is not looked at: a job that trains
// on the first thousand examples of 60,000 starts in a fraction of the time. At least 0.
at::Tensor read_idx_first(const std::string& path, int64_t max_items, Env* env = Env::Default());

}  // namespace dist::data
