// A safetensors file opened for reading parts of it (dist/train/safetensors.h has the format).
// load_safetensors reads every tensor whole; a reader that needs only a range of a tensor's
// elements (a worker restoring its share of a sharded checkpoint) reads just those bytes, and
// can pass over the rest in bounded pieces (to check a checksum) without holding it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/core/env.h"

namespace dist::detail {

class SafetensorsReader {
 public:
  struct Entry {
    std::string name;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
    int64_t numel = 0;
    int64_t element_size = 0;
    uint64_t offset = 0;  // of its first byte in the file
  };

  // Opens `path` and checks its header and layout as load_safetensors does (the same
  // DataErrors); allocates no tensor.
  SafetensorsReader(const std::string& path, Env* env);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const;
  uint64_t size() const;  // of the file, in bytes
  const std::map<std::string, std::string>& metadata() const;
  // In the order of their data in the file.
  const std::vector<Entry>& entries() const;

  // The whole tensor (a BOOL tensor's bytes checked to be 0 or 1).
  at::Tensor read(const Entry& entry) const;
  // Passes the entry's bytes to `take` in order, in pieces of at most `bytes_per_piece` (a
  // multiple of its element size): `take(bytes, size, first_element)`.
  void read_in_pieces(const Entry& entry, size_t bytes_per_piece,
                      const std::function<void(const char*, size_t, int64_t)>& take) const;

 private:
  struct File;
  std::unique_ptr<File> file_;
  std::map<std::string, std::string> metadata_;
  std::vector<Entry> entries_;
};

}  // namespace dist::detail
