#include "data/records/tfrecord_file.h"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "core/crc32c.h"
#include "core/inflating_file.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

constexpr uint64_t kHeaderBytes = 12;  // uint64 length + uint32 masked CRC of it
constexpr uint64_t kCrcBytes = 4;

std::string hex32(uint32_t v) {
  std::ostringstream out;
  out << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return out.str();
}

uint32_t load_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // little-endian host, as the format
  return v;
}

}  // namespace

struct TFRecordFileReader::Impl {
  // The content: the file's bytes, or the decompressed stream. Every read goes through the
  // Env's file (env.h), so a test's Env can fail it.
  std::unique_ptr<SequentialFile> content;
  uint64_t file_size = 0;    // when opened
  uint64_t content_pos = 0;  // bytes of content read or skipped

  // Content read but not yet consumed: buffer [begin, end).
  std::unique_ptr<char[]> buffer{new char[kReadBufferBytes]};
  size_t begin = 0;
  size_t end = 0;
};

TFRecordFileReader::TFRecordFileReader(std::string path, Compression compression, Env* env)
    : path_(std::move(path)), compression_(compression), impl_(std::make_unique<Impl>()) {
  DIST_CHECK_ARG(env != nullptr, "TFRecordFileReader(", path_, "): the Env is null");
  FileInfo info;
  try {
    info = env->file_info(path_);
  } catch (const DataError& e) {
    throw DataError(::dist::detail::concat("cannot stat TFRecord file ", path_, ": ", e.what()));
  }
  DIST_CHECK(info.kind != FileKind::kMissing, DataError, "TFRecord file ", path_,
             " does not exist");
  DIST_CHECK(info.kind == FileKind::kRegular, DataError, path_, " is not a regular file but ",
             file_kind_phrase(info.kind), ": give a TFRecord file");
  std::unique_ptr<RandomAccessFile> file;
  try {
    file = env->new_random_access_file(path_);  // refuses a FIFO put there since, unblocked
  } catch (const DataError& e) {
    throw DataError(::dist::detail::concat("cannot open TFRecord file ", path_, ": ", e.what()));
  }
  impl_->file_size = file->size();
  impl_->content = sequential_reader(std::move(file));
  if (compression_ != Compression::kNone) {
    impl_->content = std::make_unique<::dist::detail::InflatingFile>(
        std::move(impl_->content), compression_ == Compression::kGzip
                                       ? ::dist::detail::StreamFormat::kGzip
                                       : ::dist::detail::StreamFormat::kZlib);
  }
}

TFRecordFileReader::~TFRecordFileReader() = default;

void TFRecordFileReader::check_ok() const {
  if (!error_.empty()) throw DataError(error_);
}

void TFRecordFileReader::fail(const std::string& message) {
  error_ = path_ + ": " + message;
  throw DataError(error_);
}

std::string TFRecordFileReader::position() const {
  const char* stream = compression_ == Compression::kNone ? "" : " of the decompressed stream";
  switch (part_) {
    case Part::kHeader:
      return ::dist::detail::concat("record ", records_, "'s 12-byte header (length and its CRC) ",
                                    "at offset ", offset_, stream);
    case Part::kData:
      return ::dist::detail::concat("record ", records_, "'s data of ", length_,
                                    " bytes (record at offset ", offset_, stream, ")");
    case Part::kDataCrc:
      break;
  }
  return ::dist::detail::concat("record ", records_, "'s 4-byte data CRC, after its ", length_,
                                " data bytes (record at offset ", offset_, stream, ")");
}

void TFRecordFileReader::truncated(uint64_t got) {
  fail(::dist::detail::concat("the ",
                              compression_ == Compression::kNone ? "file" : "decompressed stream",
                              " ends ", got, " bytes into ", position(), ": truncated"));
}

size_t TFRecordFileReader::pull(char* dst, size_t n) {
  size_t got = 0;
  try {
    got = impl_->content->read(dst, n);
  } catch (const DataError& e) {
    // A read error, a file that shrank, a corrupt or truncated compressed stream: the framing
    // is lost, so this ends the reader (failed() says so; ignore_errors moves to the next file).
    fail(::dist::detail::concat(e.what(), ", in ", position()));
  }
  impl_->content_pos += got;
  return got;
}

bool TFRecordFileReader::fill() {
  Impl& f = *impl_;
  if (f.begin > 0) {  // keep what is left at the front
    std::memmove(f.buffer.get(), f.buffer.get() + f.begin, f.end - f.begin);
    f.end -= f.begin;
    f.begin = 0;
  }
  if (f.end == kReadBufferBytes) return true;  // full already
  const size_t got = pull(f.buffer.get() + f.end, kReadBufferBytes - f.end);
  f.end += got;
  return got > 0;
}

uint64_t TFRecordFileReader::read_bytes(char* dst, uint64_t n) {
  Impl& f = *impl_;
  uint64_t got = 0;
  while (got < n) {
    if (f.begin == f.end) {
      // A large plain read bypasses the buffer.
      if (compression_ == Compression::kNone && n - got >= kReadBufferBytes) {
        const size_t r = pull(dst + got, std::min<uint64_t>(n - got, uint64_t{1} << 30));
        if (r == 0) break;
        got += r;
        continue;
      }
      if (!fill()) break;
    }
    const uint64_t take = std::min<uint64_t>(n - got, f.end - f.begin);
    std::memcpy(dst + got, f.buffer.get() + f.begin, take);
    f.begin += take;
    got += take;
  }
  return got;
}

uint64_t TFRecordFileReader::discard_bytes(uint64_t n) {
  Impl& f = *impl_;
  uint64_t done = 0;
  while (done < n) {
    if (f.begin == f.end) {
      if (compression_ == Compression::kNone) {
        // Seek over the rest; check_fits made sure the file holds it.
        const uint64_t step = f.content->skip(n - done);
        if (step == 0) break;
        f.content_pos += step;
        done += step;
        continue;
      }
      if (!fill()) break;
    }
    const uint64_t take = std::min<uint64_t>(n - done, f.end - f.begin);
    f.begin += take;
    done += take;
  }
  return done;
}

bool TFRecordFileReader::read_header(uint64_t* length) {
  check_ok();
  part_ = Part::kHeader;
  length_ = 0;
  char header[kHeaderBytes];
  const uint64_t got = read_bytes(header, kHeaderBytes);
  if (got == 0) return false;
  if (got < kHeaderBytes) truncated(got);
  std::memcpy(length, header, 8);
  const uint32_t stored = load_u32(header + 8);
  const uint32_t actual = masked_crc32c(header, 8);
  if (stored != actual)
    fail(::dist::detail::concat("record ", records_, " (at offset ", offset_,
                                ") is corrupt: the CRC of its length field (which reads ", *length,
                                ") is ", hex32(actual), " but the header stores ", hex32(stored),
                                " (masked CRC-32C)"));
  if (*length > kMaxRecordBytes)
    fail(::dist::detail::concat("record ", records_, " (at offset ", offset_, ") claims ", *length,
                                " bytes, more than the ", kMaxRecordBytes,
                                " (2 GiB) this reader accepts per record"));
  length_ = *length;
  return true;
}

void TFRecordFileReader::check_fits(uint64_t length) {
  if (compression_ != Compression::kNone) return;  // the decompressed size is unknown
  // The file position after the header, from what is still buffered.
  const Impl& f = *impl_;
  const uint64_t at = f.content_pos - (f.end - f.begin);
  const uint64_t left = f.file_size > at ? f.file_size - at : 0;
  if (left >= length + kCrcBytes) return;
  part_ = left < length ? Part::kData : Part::kDataCrc;
  truncated(left < length ? left : left - length);
}

bool TFRecordFileReader::next(std::string* record) {
  uint64_t length;
  if (!read_header(&length)) return false;
  check_fits(length);  // before allocating what a truncated file cannot hold
  part_ = Part::kData;
  record->resize(length);
  const uint64_t got = read_bytes(record->data(), length);
  if (got < length) truncated(got);
  part_ = Part::kDataCrc;
  char crc[kCrcBytes];
  const uint64_t crc_got = read_bytes(crc, kCrcBytes);
  if (crc_got < kCrcBytes) truncated(crc_got);
  const uint32_t stored = load_u32(crc);
  const uint32_t actual = masked_crc32c(record->data(), length);
  const std::string damage =
      stored == actual
          ? std::string()
          : ::dist::detail::concat(path_, ": record ", records_, " (at offset ", offset_,
                                   ") is corrupt: the CRC of its ", length, " data bytes is ",
                                   hex32(actual), " but the file stores ", hex32(stored),
                                   " (masked CRC-32C)");
  ++records_;
  offset_ += kHeaderBytes + length + kCrcBytes;
  // The record was passed whole and its length's CRC held, so the framing is intact: unlike
  // the other errors this one does not end the reader, and the next call reads the next
  // record (ignore_errors skips just this one).
  if (!damage.empty()) throw DataError(damage);
  return true;
}

bool TFRecordFileReader::skip() {
  uint64_t length;
  if (!read_header(&length)) return false;
  check_fits(length);
  part_ = Part::kData;
  const uint64_t got = discard_bytes(length);
  if (got < length) truncated(got);
  part_ = Part::kDataCrc;
  const uint64_t crc_got = discard_bytes(kCrcBytes);
  if (crc_got < kCrcBytes) truncated(crc_got);
  ++records_;
  offset_ += kHeaderBytes + length + kCrcBytes;
  return true;
}

int64_t count_records(const std::string& path, Compression compression, Env* env) {
  TFRecordFileReader reader(path, compression, env);
  while (reader.skip()) {
  }
  return reader.records_read();
}

ReadableRecords count_readable_records(const std::string& path, Compression compression, Env* env) {
  TFRecordFileReader reader(path, compression, env);
  try {
    while (reader.skip()) {
    }
  } catch (const DataError& e) {
    return {reader.records_read(), e.what()};
  }
  return {reader.records_read(), ""};
}

}  // namespace dist::data::detail
