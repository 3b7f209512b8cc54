// Sequential reading of a data file that may be gzip-compressed, built so that a reader can
// check the sizes a header claims against the file before allocating for them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dist/core/env.h"

namespace dist::data::detail {

// Reads the bytes of one file in order, through an Env (env.h). A file starting with the gzip
// magic (1f 8b) is decompressed (core/inflating_file.h), whatever its name. Every failure is a
// dist::DataError that names the file: a read error, a file that shrank while read, a corrupt
// or truncated gzip stream. Not thread-safe.
class FileBytes {
 public:
  // Opens `path` through `env`. Throws if it cannot be opened, is not a regular file, or starts
  // like a gzip file but is too short to hold a gzip header and trailer.
  explicit FileBytes(const std::string& path, Env* env = Env::Default());
  ~FileBytes();
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;

  const std::string& path() const { return path_; }
  bool gzipped() const { return gzipped_; }
  // The size on disk.
  uint64_t file_size() const { return file_size_; }
  // The size of the content: the file size, or for gzip the trailer's ISIZE field, which is
  // the uncompressed size mod 2^32 of the last member and is only confirmed by reading.
  uint64_t size() const { return gzipped_ ? gzip_isize_ : file_size_; }

  // Throws if the file cannot hold exactly `total` bytes of content (counted from the
  // start), as far as can be told without reading it. `what` says where the claim comes
  // from, e.g. "its IDX header describes 3 x 28 x 28 uint8 values"; it goes in the message.
  // For gzip, only a shortfall is certain before reading; trailing bytes are found by
  // expect_end.
  void check_size(uint64_t total, const std::string& what) const;

  // Reads exactly `n` bytes of `what` into `dst`, or throws (truncated or corrupt data).
  void read_exact(void* dst, uint64_t n, const std::string& what);

  // Throws if any content remains ("has N trailing bytes") or, for gzip, if the stream's
  // end is missing or its checksum is wrong.
  void expect_end();

 private:
  // Reads n bytes at `offset` of the opened file (the gzip magic and trailer).
  void read_at(const RandomAccessFile& file, uint64_t offset, size_t n, void* out);
  // Reads up to n bytes; returns fewer only at the end of the content. Throws on errors.
  uint64_t read_some(void* dst, uint64_t n);

  std::string path_;
  std::unique_ptr<SequentialFile> content_;  // the file's bytes, or the decompressed stream
  bool gzipped_ = false;
  uint64_t file_size_ = 0;
  uint64_t gzip_isize_ = 0;
  uint64_t consumed_ = 0;  // content bytes read so far
};

}  // namespace dist::data::detail
