// Reading and writing the safetensors format (https://github.com/huggingface/safetensors), so
// that weights move to and from Python (safetensors.torch, transformers) without pickle.
//
// Layout of a file:
//   bytes [0, 8)        N, the header length, a little-endian uint64
//   bytes [8, 8 + N)    a JSON object, padded with spaces so that the data starts 8-aligned:
//                         {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
//                          ..., "__metadata__": {"<key>": "<value>", ...}}
//   bytes [8 + N, end)  the data section; tensor <name> is bytes [b, e) of it, little-endian,
//                       row-major. Tensors are stored back to back without gaps.
// Supported dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "dist/core/env.h"

namespace dist {

// Writes `tensors` (any device and layout; copied to contiguous CPU) in the given order, with
// `metadata` as "__metadata__" (omitted when empty).
//
// Atomic: the bytes go to "<path>.tmp.<pid>", which is synced and renamed over `path`, and the
// directory is synced, so a crash leaves either the old file or the complete new one. All file
// access goes through `env` (not owned; see env.h).
// Concurrent saves to one path from one process are not supported (they share the temp name).
// Throws InvalidArgument for an undefined or sparse tensor, an unsupported dtype, an empty
// name, a duplicate name, the reserved name "__metadata__", or a `path` that exists and is not
// a regular file (a directory, device, FIFO or socket: nothing is written); throws
// DataError naming the path and the system's reason when the file system fails (the temp file
// is removed).
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      Env* env = Env::Default());

struct SafetensorsFile {
  // In the order of their data in the file (ascending data_offsets; an empty tensor before a
  // tensor at its offset, empty ones at one offset in the header's order), which for files written
  // by save_safetensors is the order they were passed in.
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  std::map<std::string, std::string> metadata;
};

// Reads a whole file into CPU tensors, through `env` (not owned). The header is validated
// completely before any tensor is allocated, so a corrupt or hostile file cannot make it
// allocate more than the file holds.
// Throws DataError naming the file (and the tensor, where one is concerned) when the file is
// missing or unreadable, shorter than 8 bytes, has a header longer than the file or than
// 100 MB, a header that is not a JSON object of the form above, an unknown dtype, a shape entry
// that is negative or not an integer, an element count that overflows, data_offsets that are
// reversed, overlapping, leave gaps or trailing bytes, or lie past the end of the file, a byte
// range that does not match shape and dtype, or a BOOL byte other than 0 or 1.
SafetensorsFile load_safetensors(const std::string& path, Env* env = Env::Default());

}  // namespace dist
