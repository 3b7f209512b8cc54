// Sequential reading of TFRecord files (format: include/dist/data/tfrecord.h), with every
// checksum checked, for the TFRecord data sets.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dist/core/env.h"
#include "dist/data/tfrecord.h"

namespace dist::data::detail {

// The largest record the reader accepts (and the writer writes): 2 GiB. The format allows up
// to 2^64 - 1 bytes, but a training example is far smaller; a longer length whose CRC checks
// is a file nobody should hold in memory one record at a time.
constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 31;
// Bytes per read of the file (and per chunk of decompressed data).
constexpr size_t kReadBufferBytes = size_t{256} << 10;

// Reads the records of one TFRecord file in order, checking the CRC of every length and every
// record's data. Memory stays at about two read buffers plus the record being read, whatever
// the file's size.
//
// Errors are dist::DataError naming the file, the record's index, its byte offset (in the
// decompressed stream for a compressed file), what was read and what was expected:
//   "<path>: the file ends 37 bytes into record 12's data of 4096 bytes (record at offset
//    49380): truncated"
//   "<path>: record 12 (at offset 49380) is corrupt: the CRC of its 4096 data bytes ..."
// After an error the reader throws the same error again on every call (failed() says so), except
// after a record whose data's CRC does not match: that record was passed whole and the framing
// is intact, so the next call reads the next record. Not thread-safe.
class TFRecordFileReader {
 public:
  // Opens `path` through `env` (env.h: every read goes through it). Throws DataError if it is
  // missing, or is a directory, FIFO or any other non-regular file (looked at before opening,
  // and the Env's open refuses one too, so a FIFO never blocks), or cannot be opened. A read
  // error, a file that shrank while read and a damaged compressed stream end the reader, its
  // message naming the file and the record.
  TFRecordFileReader(std::string path, Compression compression, Env* env = Env::Default());
  ~TFRecordFileReader();
  TFRecordFileReader(const TFRecordFileReader&) = delete;
  TFRecordFileReader& operator=(const TFRecordFileReader&) = delete;

  // Reads the next record into *record (replacing its content). Returns false at a clean end
  // of file (after the last record's trailing CRC, or for an empty file).
  bool next(std::string* record);
  // Passes over the next record without returning it; false at a clean end of file. The
  // length's CRC is checked, the data's is not. Uncompressed, the data is not even read: the
  // reader seeks over it (or steps over it in its buffer).
  bool skip();

  // The index of the next record (the count of records read or skipped).
  int64_t records_read() const { return records_; }
  // The byte offset of the next record in the (decompressed) stream.
  uint64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }
  // Whether an error ended the reader (every later call throws it again).
  bool failed() const { return !error_.empty(); }

 private:
  struct Impl;  // the content stream and its buffer

  // Reads the 12-byte header of the next record and checks its CRC; false at a clean end.
  bool read_header(uint64_t* length);
  // Throws if the record's data and CRC cannot fit in what is left of an uncompressed file.
  void check_fits(uint64_t length);
  // Copies up to n bytes of content into dst; fewer only at the end of the content.
  uint64_t read_bytes(char* dst, uint64_t n);
  // Passes over up to n bytes of content; fewer only at the end of the content.
  uint64_t discard_bytes(uint64_t n);
  // Adds content to the buffer; false at its end. Throws on read errors and bad streams.
  bool fill();
  // Up to n bytes of content from the file (or the decompressing stream); fewer only at its
  // end. A failure there ends the reader (fail).
  size_t pull(char* dst, size_t n);
  // Where the reader is, for messages: "record 12's data of 4096 bytes (record at offset 9)".
  std::string position() const;
  [[noreturn]] void truncated(uint64_t got);
  [[noreturn]] void fail(const std::string& message);
  void check_ok() const;

  std::string path_;
  Compression compression_;
  std::unique_ptr<Impl> impl_;
  int64_t records_ = 0;
  uint64_t offset_ = 0;
  enum class Part { kHeader, kData, kDataCrc };
  Part part_ = Part::kHeader;  // the part of the record being read, for messages
  uint64_t length_ = 0;        // the length of the record being read, once known
  std::string error_;          // the first error, thrown again by later calls
};

// The number of records in the file, found by walking their headers (checking the length CRCs;
// an uncompressed file's data is seeked over, a compressed one is decompressed). Throws as
// TFRecordFileReader does.
int64_t count_records(const std::string& path, Compression compression, Env* env = Env::Default());

// The records of a file as far as its framing holds: how many can be read, and the damage that
// ends the walk before the file's end (the reader's message: a truncated record, a length whose
// CRC fails, an oversized length, a corrupt compressed stream), "" when there is none. Only a
// file that cannot be opened throws.
struct ReadableRecords {
  int64_t records = 0;
  std::string damage;
};
ReadableRecords count_readable_records(const std::string& path, Compression compression,
                                       Env* env = Env::Default());

}  // namespace dist::data::detail
