#include "data/sources/file_bytes.h"

#include <algorithm>
#include <vector>

#include "core/inflating_file.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

// A gzip file is at least a 10-byte header, a deflate block and an 8-byte trailer.
constexpr uint64_t kMinGzipBytes = 20;
// Deflate cannot expand data by more than 1032:1, so a gzip file of n bytes holds at most
// about 1032 * n. This bounds a claimed size where ISIZE (mod 2^32) cannot.
constexpr uint64_t kMaxDeflateRatio = 1032;
// zlib takes lengths below 2^32: read in chunks.
constexpr uint64_t kMaxChunk = uint64_t{1} << 30;

}  // namespace

FileBytes::FileBytes(const std::string& path, Env* env) : path_(path) {
  DIST_CHECK_ARG(env != nullptr, "reading ", path, ": the Env is null");
  std::unique_ptr<RandomAccessFile> file;
  try {
    file = env->new_random_access_file(path);  // refuses anything but a regular file
  } catch (const DataError& e) {
    throw DataError(::dist::detail::concat("cannot open ", path, ": ", e.what()));
  }
  file_size_ = file->size();
  unsigned char magic[2] = {0, 0};
  read_at(*file, 0, std::min<uint64_t>(file_size_, 2), magic);
  gzipped_ = file_size_ >= 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (gzipped_) {
    DIST_CHECK(file_size_ >= kMinGzipBytes, DataError, path_, " is truncated: it starts like a ",
               "gzip file but holds only ", file_size_, " bytes, less than a gzip header and ",
               "trailer");
    unsigned char isize[4];
    read_at(*file, file_size_ - 4, 4, isize);
    gzip_isize_ = uint64_t{isize[0]} | uint64_t{isize[1]} << 8 | uint64_t{isize[2]} << 16 |
                  uint64_t{isize[3]} << 24;
  }
  content_ = sequential_reader(std::move(file));
  if (gzipped_)
    content_ = std::make_unique<::dist::detail::InflatingFile>(std::move(content_),
                                                               ::dist::detail::StreamFormat::kGzip);
}

void FileBytes::read_at(const RandomAccessFile& file, uint64_t offset, size_t n, void* out) {
  try {
    file.read(offset, n, out);
  } catch (const DataError& e) {
    throw DataError(::dist::detail::concat("cannot read ", path_, ": ", e.what()));
  }
}

FileBytes::~FileBytes() = default;

void FileBytes::check_size(uint64_t total, const std::string& what) const {
  if (!gzipped_) {
    DIST_CHECK(total <= file_size_, DataError, path_,
               " is truncated or its header is corrupt: ", what, " (", total,
               " bytes in all) but the file holds only ", file_size_, " bytes");
    DIST_CHECK(total >= file_size_, DataError, path_, " has ", file_size_ - total,
               " trailing bytes: ", what, " (", total, " bytes in all) but the file holds ",
               file_size_, " bytes");
    return;
  }
  uint64_t bound = file_size_ * kMaxDeflateRatio;
  DIST_CHECK(total <= bound, DataError, path_, " is truncated or its header is corrupt: ", what,
             " (", total, " bytes in all) but a gzip file of ", file_size_,
             " bytes can hold at most ", bound);
  // ISIZE is exact below 4 GiB. A larger ISIZE than claimed is left to expect_end, which
  // can tell trailing bytes from a corrupt stream.
  DIST_CHECK(total >= (uint64_t{1} << 32) || total <= gzip_isize_, DataError, path_,
             " is truncated or corrupt: ", what, " (", total,
             " bytes in all) but its gzip trailer says it holds ", gzip_isize_, " bytes");
}

void FileBytes::read_exact(void* dst, uint64_t n, const std::string& what) {
  uint64_t got = read_some(dst, n);
  if (got == n) return;
  throw DataError(::dist::detail::concat(path_, " is truncated: expected ", n, " bytes of ", what,
                                         " at content offset ", consumed_ - got, " but got only ",
                                         got));
}

void FileBytes::expect_end() {
  uint64_t expected = consumed_;
  uint64_t trailing = 0;
  if (!gzipped_) {
    trailing = file_size_ > consumed_ ? file_size_ - consumed_ : 0;
  } else {
    // Reading to the end makes zlib check the CRC and length in the trailer.
    std::vector<unsigned char> sink(1 << 16);
    for (uint64_t got; (got = read_some(sink.data(), sink.size())) > 0;) trailing += got;
  }
  DIST_CHECK(trailing == 0, DataError, path_, " has ", trailing, " trailing bytes after the ",
             expected, " bytes expected");
}

uint64_t FileBytes::read_some(void* dst, uint64_t n) {
  auto* out = static_cast<unsigned char*>(dst);
  uint64_t done = 0;
  while (done < n) {
    size_t got = 0;
    try {
      got = content_->read(out + done, static_cast<size_t>(std::min(n - done, kMaxChunk)));
    } catch (const DataError& e) {
      // The Env's read error (it names the file) or the gzip stream's damage.
      throw DataError(::dist::detail::concat("cannot read ", path_, " after ", consumed_,
                                             " bytes of content: ", e.what()));
    }
    if (got == 0) break;
    done += got;
    consumed_ += got;
  }
  return done;
}

}  // namespace dist::data::detail
