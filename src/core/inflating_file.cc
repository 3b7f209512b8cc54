#include "core/inflating_file.h"

#include <zlib.h>

#include <algorithm>
#include <limits>

#include "dist/core/error.h"

namespace dist::detail {
namespace {

// Compressed bytes per read of the file.
constexpr size_t kInputBytes = size_t{256} << 10;
// zlib counts in unsigned int: at most this much output per inflate() call.
constexpr size_t kMaxOutput = size_t{1} << 30;

}  // namespace

struct InflatingFile::Zlib {
  z_stream zs{};
  std::unique_ptr<unsigned char[]> input{new unsigned char[kInputBytes]};
  ~Zlib() { inflateEnd(&zs); }
};

InflatingFile::InflatingFile(std::unique_ptr<SequentialFile> compressed, StreamFormat format)
    : file_(std::move(compressed)), format_(format) {
  auto zlib = std::make_unique<Zlib>();
  // windowBits 15 (the largest window) selects zlib's header; +16 the gzip header.
  const int window_bits = format_ == StreamFormat::kGzip ? 16 + 15 : 15;
  DIST_CHECK(inflateInit2(&zlib->zs, window_bits) == Z_OK, DataError,
             "cannot start decompressing (zlib could not allocate its state)");
  zlib_ = std::move(zlib);
}

InflatingFile::~InflatingFile() = default;

void InflatingFile::fail(std::string message) {
  error_ = std::move(message);
  throw DataError(error_);
}

void InflatingFile::refill() {
  z_stream& zs = zlib_->zs;
  size_t got = 0;
  try {
    got = file_->read(zlib_->input.get(), kInputBytes);
  } catch (const DataError& e) {
    fail(e.what());  // the file's own message, which names it
  }
  file_eof_ = got == 0;
  file_pos_ += got;
  zs.next_in = zlib_->input.get();
  zs.avail_in = static_cast<unsigned>(got);
}

void InflatingFile::next_member() {
  z_stream& zs = zlib_->zs;
  if (format_ == StreamFormat::kZlib) {
    const uint64_t at = file_pos_ - zs.avail_in;
    uint64_t rest = zs.avail_in;
    try {
      rest += file_->skip(std::numeric_limits<uint64_t>::max());
    } catch (const DataError& e) {
      fail(e.what());
    }
    fail(::dist::detail::concat("the zlib stream ends at file offset ", at, " but ", rest,
                                " more bytes follow it: corrupt"));
  }
  inflateReset(&zs);
  stream_ended_ = false;
}

size_t InflatingFile::inflate_some(char* out, size_t size) {
  z_stream& zs = zlib_->zs;
  zs.next_out = reinterpret_cast<unsigned char*>(out);
  zs.avail_out = static_cast<unsigned>(std::min(size, kMaxOutput));
  const unsigned before = zs.avail_out;
  const int status = inflate(&zs, Z_NO_FLUSH);
  if (status == Z_STREAM_END) {
    stream_ended_ = true;
  } else if (status != Z_OK && status != Z_BUF_ERROR) {
    fail(::dist::detail::concat(
        "the ", name(), " stream is corrupt (zlib: ", zs.msg != nullptr ? zs.msg : zError(status),
        ") near file offset ", file_pos_ - zs.avail_in));
  }
  return before - zs.avail_out;
}

size_t InflatingFile::read(void* out, size_t size) {
  if (!error_.empty()) throw DataError(error_);
  z_stream& zs = zlib_->zs;
  size_t done = 0;
  while (done < size) {
    if (zs.avail_in == 0 && !file_eof_) refill();
    if (stream_ended_) {
      if (zs.avail_in == 0 && file_eof_) break;  // the clean end
      if (zs.avail_in == 0) continue;            // read on: is there another member?
      next_member();
    }
    if (zs.avail_in == 0 && file_eof_) {
      if (file_pos_ == 0) break;  // an empty file: empty content
      fail(::dist::detail::concat("the ", name(), " stream is truncated: the file ends after ",
                                  file_pos_, " bytes without the stream's end"));
    }
    done += inflate_some(static_cast<char*>(out) + done, size - done);
  }
  return done;
}

uint64_t InflatingFile::skip(uint64_t size) {
  char sink[16 << 10];
  uint64_t done = 0;
  while (done < size) {
    const size_t got =
        read(sink, static_cast<size_t>(std::min<uint64_t>(size - done, sizeof sink)));
    if (got == 0) break;
    done += got;
  }
  return done;
}

}  // namespace dist::detail
