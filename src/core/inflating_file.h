// Decompressing a zlib or gzip stream read through any Env (env.h): the one inflater of the
// data readers (TFRecord files with GZIP or ZLIB compression, IDX and CIFAR-10 files that are
// gzipped), so each reader's faults and messages come from the same place.
#pragma once

#include <memory>
#include <string>

#include "dist/core/env.h"

namespace dist::detail {

enum class StreamFormat { kZlib, kGzip };

// The decompressed content of `compressed`, in order. gzip: one member or several one after
// another (RFC 1952 2.2); zlib: one stream and nothing after it. An empty file is empty
// content (TensorFlow reads an empty compressed TFRecord file so). Not thread-safe.
//
// read() throws DataError with a message that does not name the file (the file's reader adds
// its name and its position in the content): "the gzip stream is truncated: the file ends
// after 37 bytes without the stream's end", "the gzip stream is corrupt (zlib: invalid block
// type) near file offset 12", "the zlib stream ends at file offset 20 but 4 more bytes follow
// it: corrupt"; the compressed file's own read errors (they name it) pass unchanged. After an
// error every call throws it again.
class InflatingFile : public SequentialFile {
 public:
  InflatingFile(std::unique_ptr<SequentialFile> compressed, StreamFormat format);
  ~InflatingFile() override;
  InflatingFile(const InflatingFile&) = delete;
  InflatingFile& operator=(const InflatingFile&) = delete;

  size_t read(void* out, size_t size) override;
  // Decompresses and discards: a compressed stream cannot be seeked.
  uint64_t skip(uint64_t size) override;

 private:
  struct Zlib;  // zlib's state, apart so that zlib.h stays out of this header
  // Reads more compressed bytes when the input is used up.
  void refill();
  // After a stream's end with more input: the next gzip member, or an error for zlib.
  void next_member();
  // One inflate() call into out[0, size); returns the bytes produced.
  size_t inflate_some(char* out, size_t size);
  [[noreturn]] void fail(std::string message);
  const char* name() const { return format_ == StreamFormat::kGzip ? "gzip" : "zlib"; }

  std::unique_ptr<SequentialFile> file_;
  StreamFormat format_;
  std::unique_ptr<Zlib> zlib_;
  uint64_t file_pos_ = 0;  // compressed bytes read from file_
  bool file_eof_ = false;
  bool stream_ended_ = false;
  std::string error_;  // the first error, thrown again by later calls
};

}  // namespace dist::detail
