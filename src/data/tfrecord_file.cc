#include "data/tfrecord_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "core/crc32c.h"
#include "dist/core/error.h"
#include "dist/core/output_file.h"

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
  int fd = -1;
  uint64_t file_size = 0;
  uint64_t file_pos = 0;  // bytes of the file read or seeked over
  bool file_eof = false;

  // Content (the file's bytes, or the decompressed stream) read but not yet consumed: buffer
  // [begin, end).
  std::unique_ptr<char[]> buffer{new char[kReadBufferBytes]};
  size_t begin = 0;
  size_t end = 0;

  // Compressed files only.
  bool inflating = false;
  bool stream_ended = false;
  z_stream zs{};
  std::unique_ptr<unsigned char[]> input;

  ~Impl() {
    if (inflating) inflateEnd(&zs);
    if (fd >= 0) ::close(fd);
  }
};

TFRecordFileReader::TFRecordFileReader(std::string path, Compression compression)
    : path_(std::move(path)), compression_(compression), impl_(std::make_unique<Impl>()) {
  // stat first: open(2) of a FIFO blocks until a writer appears.
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    const int error = errno;
    DIST_CHECK(error != ENOENT, DataError, "TFRecord file ", path_, " does not exist");
    throw DataError(
        ::dist::detail::concat("cannot stat TFRecord file ", path_, ": ", std::strerror(error)));
  }
  DIST_CHECK(S_ISREG(st.st_mode), DataError, path_, " ", why_not_an_output_file(path_),
             ": give a TFRecord file");
  // O_NONBLOCK in case the path became a FIFO since the stat; fstat checks again.
  impl_->fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  DIST_CHECK(impl_->fd >= 0, DataError, "cannot open TFRecord file ", path_, ": ",
             std::strerror(errno));
  DIST_CHECK(::fstat(impl_->fd, &st) == 0 && S_ISREG(st.st_mode), DataError, path_,
             " is not a regular file (any more), not a TFRecord file");
  ::fcntl(impl_->fd, F_SETFL, ::fcntl(impl_->fd, F_GETFL) & ~O_NONBLOCK);
  impl_->file_size = static_cast<uint64_t>(st.st_size);
  ::posix_fadvise(impl_->fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // a hint: read ahead more

  if (compression_ != Compression::kNone) {
    impl_->input.reset(new unsigned char[kReadBufferBytes]);
    // windowBits 15 (the largest window) selects zlib's header; +16 the gzip header.
    const int window_bits = compression_ == Compression::kGzip ? 16 + 15 : 15;
    DIST_CHECK(inflateInit2(&impl_->zs, window_bits) == Z_OK, DataError,
               "cannot start decompressing ", path_, " (zlib could not allocate its state)");
    impl_->inflating = true;
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

bool TFRecordFileReader::fill() {
  Impl& f = *impl_;
  if (f.begin > 0) {  // keep what is left at the front
    std::memmove(f.buffer.get(), f.buffer.get() + f.begin, f.end - f.begin);
    f.end -= f.begin;
    f.begin = 0;
  }
  if (f.end == kReadBufferBytes) return true;  // full already
  return compression_ == Compression::kNone ? fill_plain() : fill_compressed();
}

bool TFRecordFileReader::fill_plain() {
  Impl& f = *impl_;
  for (;;) {
    const ssize_t r = ::read(f.fd, f.buffer.get() + f.end, kReadBufferBytes - f.end);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      fail(::dist::detail::concat("cannot read at file offset ", f.file_pos, ": ",
                                  std::strerror(errno)));
    f.end += static_cast<size_t>(r);
    f.file_pos += static_cast<uint64_t>(r);
    return r > 0;
  }
}

bool TFRecordFileReader::fill_compressed() {
  Impl& f = *impl_;
  const char* format = compression_ == Compression::kGzip ? "gzip" : "zlib";
  z_stream& zs = f.zs;
  zs.next_out = reinterpret_cast<unsigned char*>(f.buffer.get() + f.end);
  zs.avail_out = static_cast<unsigned>(kReadBufferBytes - f.end);
  while (zs.avail_out == kReadBufferBytes - f.end) {  // until some output
    if (zs.avail_in == 0 && !f.file_eof) {
      ssize_t r;
      do r = ::read(f.fd, f.input.get(), kReadBufferBytes);
      while (r < 0 && errno == EINTR);
      if (r < 0)
        fail(::dist::detail::concat("cannot read at file offset ", f.file_pos, ": ",
                                    std::strerror(errno)));
      f.file_eof = r == 0;
      f.file_pos += static_cast<uint64_t>(r);
      zs.next_in = f.input.get();
      zs.avail_in = static_cast<unsigned>(r);
    }
    if (f.stream_ended) {
      if (zs.avail_in == 0 && f.file_eof) return false;
      // A gzip file may hold several members (RFC 1952 2.2), one after the other; a zlib
      // stream is one.
      if (compression_ == Compression::kZlib)
        fail(::dist::detail::concat(
            "the zlib stream ends at file offset ", f.file_pos - zs.avail_in, " but ",
            f.file_size - f.file_pos + zs.avail_in, " more bytes follow it: corrupt"));
      inflateReset(&zs);
      f.stream_ended = false;
    }
    if (zs.avail_in == 0 && f.file_eof) {
      if (f.file_pos == 0) return false;  // an empty file: no records, as TensorFlow reads it
      fail(::dist::detail::concat("the ", format, " stream is truncated: the file ends after ",
                                  f.file_pos, " bytes without the stream's end, in ", position()));
    }
    const int status = inflate(&zs, Z_NO_FLUSH);
    if (status == Z_STREAM_END) {
      f.stream_ended = true;
    } else if (status != Z_OK && status != Z_BUF_ERROR) {
      fail(::dist::detail::concat(
          "the ", format, " stream is corrupt (zlib: ", zs.msg != nullptr ? zs.msg : zError(status),
          ") near file offset ", f.file_pos - zs.avail_in, ", in ", position()));
    }
  }
  f.end = kReadBufferBytes - zs.avail_out;
  return true;
}

uint64_t TFRecordFileReader::read_bytes(char* dst, uint64_t n) {
  Impl& f = *impl_;
  uint64_t got = 0;
  while (got < n) {
    if (f.begin == f.end) {
      // A large plain read bypasses the buffer.
      if (compression_ == Compression::kNone && n - got >= kReadBufferBytes) {
        const uint64_t want = std::min<uint64_t>(n - got, uint64_t{1} << 30);
        const ssize_t r = ::read(f.fd, dst + got, want);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
          fail(::dist::detail::concat("cannot read at file offset ", f.file_pos, ": ",
                                      std::strerror(errno)));
        if (r == 0) break;
        got += static_cast<uint64_t>(r);
        f.file_pos += static_cast<uint64_t>(r);
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
        const uint64_t step = std::min(n - done, f.file_size - std::min(f.file_pos, f.file_size));
        if (step == 0) break;
        if (::lseek(f.fd, static_cast<off_t>(step), SEEK_CUR) < 0)
          fail(::dist::detail::concat("cannot seek past file offset ", f.file_pos, ": ",
                                      std::strerror(errno)));
        f.file_pos += step;
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
  const uint64_t at = f.file_pos - (f.end - f.begin);
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

int64_t count_records(const std::string& path, Compression compression) {
  TFRecordFileReader reader(path, compression);
  while (reader.skip()) {
  }
  return reader.records_read();
}

ReadableRecords count_readable_records(const std::string& path, Compression compression) {
  TFRecordFileReader reader(path, compression);
  try {
    while (reader.skip()) {
    }
  } catch (const DataError& e) {
    return {reader.records_read(), e.what()};
  }
  return {reader.records_read(), ""};
}

}  // namespace dist::data::detail
