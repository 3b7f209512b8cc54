#include "data/file_bytes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

// A gzip file is at least a 10-byte header, a deflate block and an 8-byte trailer.
constexpr uint64_t kMinGzipBytes = 20;
// Deflate cannot expand data by more than 1032:1, so a gzip file of n bytes holds at most
// about 1032 * n. This bounds a claimed size where ISIZE (mod 2^32) cannot.
constexpr uint64_t kMaxDeflateRatio = 1032;
// zlib and read(2) take lengths below 2^31 or 2^32: read in chunks.
constexpr uint64_t kMaxChunk = uint64_t{1} << 30;

gzFile as_gz(void* p) { return static_cast<gzFile>(p); }

// pread until n bytes or end of file; returns the count read, or -1 with errno set.
ssize_t pread_full(int fd, unsigned char* dst, size_t n, off_t offset) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, dst + done, n - done, offset + static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace

FileBytes::FileBytes(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DIST_CHECK(fd_ >= 0, DataError, "cannot open ", path, ": ", std::strerror(errno));
  try {
    struct stat st {};
    DIST_CHECK(::fstat(fd_, &st) == 0, DataError, "cannot stat ", path, ": ", std::strerror(errno));
    DIST_CHECK(S_ISREG(st.st_mode), DataError, path, " is not a regular file");
    file_size_ = static_cast<uint64_t>(st.st_size);

    unsigned char magic[2] = {0, 0};
    DIST_CHECK(pread_full(fd_, magic, 2, 0) >= 0, DataError, "cannot read ", path, ": ",
               std::strerror(errno));
    if (file_size_ < 2 || magic[0] != 0x1f || magic[1] != 0x8b) return;  // plain file

    DIST_CHECK(file_size_ >= kMinGzipBytes, DataError, path, " is truncated: it starts like a ",
               "gzip file but holds only ", file_size_, " bytes, less than a gzip header and ",
               "trailer");
    unsigned char isize[4];
    DIST_CHECK(pread_full(fd_, isize, 4, static_cast<off_t>(file_size_ - 4)) == 4, DataError,
               "cannot read the gzip trailer of ", path, ": ", std::strerror(errno));
    gzip_isize_ = uint64_t{isize[0]} | uint64_t{isize[1]} << 8 | uint64_t{isize[2]} << 16 |
                  uint64_t{isize[3]} << 24;

    gzFile gz = gzdopen(fd_, "rb");
    DIST_CHECK(gz != nullptr, DataError, "cannot start decompressing ", path,
               " (zlib could not allocate its state)");
    fd_ = -1;  // gzclose closes it now
    gz_ = gz;
    gzbuffer(gz, 1 << 17);  // fewer, larger reads than the 8 KiB default
  } catch (...) {
    if (fd_ >= 0) ::close(fd_);
    throw;
  }
}

FileBytes::~FileBytes() {
  if (gz_ != nullptr) gzclose(as_gz(gz_));
  if (fd_ >= 0) ::close(fd_);
}

void FileBytes::check_size(uint64_t total, const std::string& what) const {
  if (gz_ == nullptr) {
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
  std::string zlib_note = gzip_error();
  if (!zlib_note.empty()) zlib_note = " (zlib: " + zlib_note + ")";
  throw DataError(::dist::detail::concat(path_, " is truncated: expected ", n, " bytes of ", what,
                                         " at content offset ", consumed_ - got, " but got only ",
                                         got, zlib_note));
}

void FileBytes::expect_end() {
  uint64_t expected = consumed_;
  uint64_t trailing = 0;
  if (gz_ == nullptr) {
    trailing = file_size_ > consumed_ ? file_size_ - consumed_ : 0;
  } else {
    // Reading to the end makes zlib check the CRC and length in the trailer.
    std::vector<unsigned char> sink(1 << 16);
    for (uint64_t got; (got = read_some(sink.data(), sink.size())) > 0;) trailing += got;
    std::string error = gzip_error();
    DIST_CHECK(error.empty(), DataError, path_, " is truncated or corrupt: the gzip stream ",
               "does not end properly after ", consumed_, " bytes (zlib: ", error, ")");
  }
  DIST_CHECK(trailing == 0, DataError, path_, " has ", trailing, " trailing bytes after the ",
             expected, " bytes expected");
}

uint64_t FileBytes::read_some(void* dst, uint64_t n) {
  auto* out = static_cast<unsigned char*>(dst);
  uint64_t done = 0;
  while (done < n) {
    uint64_t chunk = std::min(n - done, kMaxChunk);
    int64_t r;
    if (gz_ != nullptr) {
      r = gzread(as_gz(gz_), out + done, static_cast<unsigned>(chunk));
      DIST_CHECK(r >= 0, DataError, path_, " is corrupt or truncated: zlib failed to ",
                 "decompress it after ", consumed_, " bytes were read: ", gzip_error());
    } else {
      r = ::read(fd_, out + done, chunk);
      if (r < 0 && errno == EINTR) continue;
      DIST_CHECK(r >= 0, DataError, "cannot read ", path_, ": ", std::strerror(errno));
    }
    if (r == 0) break;
    done += static_cast<uint64_t>(r);
    consumed_ += static_cast<uint64_t>(r);
  }
  return done;
}

std::string FileBytes::gzip_error() const {
  if (gz_ == nullptr) return "";
  int errnum = Z_OK;
  std::string message = gzerror(as_gz(gz_), &errnum);
  if (errnum == Z_OK) return "";
  // zlib prefixes the name it was opened with, "<fd:N>: " here; the caller names the path.
  size_t colon = message.find(": ");
  return colon == std::string::npos ? message : message.substr(colon + 2);
}

}  // namespace dist::data::detail
