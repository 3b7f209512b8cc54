// TFRecord files: TensorFlow's container of records (each usually a serialized
// tf.train.Example, see include/dist/data/example.h), written here so that data converted for
// this library can also be read by tf.data.TFRecordDataset, and the other way round.
//
// A TFRecord file is a sequence of records, each framed as
//   uint64 length            little-endian, the byte count of data
//   uint32 masked_crc(length) the masked CRC-32C of those 8 bytes
//   data[length]
//   uint32 masked_crc(data)
// where masked_crc(x) = ((c >> 15) | (c << 17)) + 0xa282ead8 with c = CRC-32C(x). The whole
// sequence may be compressed as one gzip (RFC 1952) or zlib (RFC 1950) stream; the framing is
// then inside the decompressed bytes. Nothing in the file says which: the reader must be told,
// as TFRecordDataset is through compression_type.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "dist/core/env.h"

namespace dist::data {

enum class Compression {
  kNone,  // plain TFRecord framing
  kGzip,  // one gzip stream (deflate with a gzip header and CRC-32 trailer)
  kZlib,  // one zlib stream (deflate with a 2-byte header and Adler-32 trailer)
};

// The Compression for TFRecordDataset's compression_type: "" or "NONE", "GZIP", "ZLIB" (upper
// case, as TensorFlow spells them). Anything else throws dist::InvalidArgument listing these.
Compression compression_from_name(const std::string& name);
// "NONE", "GZIP" or "ZLIB".
const char* compression_name(Compression compression);

// Writes one TFRecord file, all or nothing: the records go to "<path>.partial", and close()
// flushes, syncs and renames it to `path` (replacing a file there), then syncs the directory.
// A writer destroyed without close() (an exception during a conversion) removes the partial
// file, so a failed conversion leaves nothing that looks finished.
//
//   TFRecordWriter out("train-00000-of-00016.tfrecord", Compression::kGzip);
//   for (...) out.write(example.serialize());
//   out.close();
//
// Writes are buffered (256 KiB) or compressed in memory before they reach the file, so write()
// is cheap per record. All file access goes through `env` (Env::Default(): the POSIX file
// system), which must outlive the writer. Errors, from any call: dist::DataError naming the file
// and the system's reason (Env's errors: "No space left on device"); after one, the writer can
// only be destroyed (which removes the partial file). Not thread-safe.
class TFRecordWriter {
 public:
  // Creates "<path>.partial" now. Throws InvalidArgument if `path` is empty or is a directory
  // or another non-regular file (a FIFO); DataError if the partial file cannot be created.
  explicit TFRecordWriter(std::string path, Compression compression = Compression::kNone,
                          Env* env = Env::Default());
  ~TFRecordWriter();
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  // Appends one record (any bytes, empty allowed).
  void write(std::string_view record);
  // Finishes the compressed stream, writes, syncs and renames the file into place. Calling it
  // again does nothing; write() after it throws InvalidArgument.
  void close();

  const std::string& path() const;
  // Records written so far.
  int64_t records() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dist::data
