#include "dist/data/tfrecord.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/crc32c.h"
#include "data/records/tfrecord_file.h"
#include "dist/core/error.h"

namespace dist::data {
namespace {

// The directory holding `path`, to sync after the rename.
std::string parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Refuses a path that exists as something a file cannot be written over: a rename would replace
// a directory's entry or fail late, and opening a FIFO for writing blocks.
void check_not_special(Env* env, const std::string& path, const std::string& what) {
  const FileKind kind = env->file_info(path).kind;
  DIST_CHECK_ARG(kind == FileKind::kMissing || kind == FileKind::kRegular, "TFRecordWriter: ", what,
                 " ", path, " exists and is ",
                 kind == FileKind::kDirectory ? "a directory"
                 : kind == FileKind::kFifo    ? "a FIFO"
                                              : "not a regular file",
                 "; pass the path of a file to write");
}

}  // namespace

Compression compression_from_name(const std::string& name) {
  if (name.empty() || name == "NONE") return Compression::kNone;
  if (name == "GZIP") return Compression::kGzip;
  if (name == "ZLIB") return Compression::kZlib;
  throw InvalidArgument(::dist::detail::concat(
      "unknown TFRecord compression type '", name,
      "'; the accepted names are \"\" or \"NONE\", \"GZIP\" and \"ZLIB\" (upper case)"));
}

const char* compression_name(Compression compression) {
  switch (compression) {
    case Compression::kNone:
      return "NONE";
    case Compression::kGzip:
      return "GZIP";
    case Compression::kZlib:
      return "ZLIB";
  }
  return "unknown";
}

struct TFRecordWriter::Impl {
  static constexpr size_t kBufferBytes = data::detail::kReadBufferBytes;

  std::string path;
  std::string partial;
  Compression compression;
  Env* env;
  std::unique_ptr<WritableFile> file;
  // Framed records not yet written (or compressed): many small writes become one large one.
  std::string staged;
  // Compressed files only: the deflate state and its output buffer.
  z_stream zs{};
  bool deflating = false;
  std::unique_ptr<unsigned char[]> out;
  int64_t records = 0;
  bool closed = false;
  bool failed = false;

  // Writes n bytes of the stream to the file, compressing them if asked; with Z_FINISH (and
  // n = 0) ends the compressed stream.
  void pass(const char* data, size_t n, int flush) {
    if (compression == Compression::kNone) {
      if (n > 0) file->append(data, n);
      return;
    }
    zs.next_in = reinterpret_cast<unsigned char*>(const_cast<char*>(data));
    for (;;) {
      // zlib counts in unsigned int: feed at most 1 GiB at a time.
      const size_t chunk = std::min<size_t>(n, size_t{1} << 30);
      zs.avail_in = static_cast<unsigned>(chunk);
      const int mode = chunk == n ? flush : Z_NO_FLUSH;
      int status;
      do {
        zs.next_out = out.get();
        zs.avail_out = static_cast<unsigned>(kBufferBytes);
        status = deflate(&zs, mode);
        DIST_INTERNAL_ASSERT(status != Z_STREAM_ERROR, "deflate of ", path);
        const size_t have = kBufferBytes - zs.avail_out;
        if (have > 0) file->append(out.get(), have);
      } while (zs.avail_out == 0 || (mode == Z_FINISH && status != Z_STREAM_END));
      n -= chunk;
      if (n == 0) return;
    }
  }

  void flush_staged() {
    if (staged.empty()) return;
    pass(staged.data(), staged.size(), Z_NO_FLUSH);
    staged.clear();
  }

  // Adds framing or record bytes to the stream.
  void emit(const char* data, size_t n) {
    if (staged.size() + n > kBufferBytes) {
      flush_staged();
      if (n >= kBufferBytes) return pass(data, n, Z_NO_FLUSH);  // a large record: no copy
    }
    staged.append(data, n);
  }
};

TFRecordWriter::TFRecordWriter(std::string path, Compression compression, Env* env)
    : impl_(std::make_unique<Impl>()) {
  DIST_CHECK_ARG(!path.empty(), "TFRecordWriter: the path is empty");
  DIST_CHECK_ARG(env != nullptr, "TFRecordWriter(", path, "): the Env is null");
  Impl& w = *impl_;
  w.path = std::move(path);
  w.partial = w.path + ".partial";
  w.compression = compression;
  w.env = env;
  check_not_special(env, w.path, "the output");
  check_not_special(env, w.partial, "the temporary file");
  w.staged.reserve(Impl::kBufferBytes);
  if (compression != Compression::kNone) {
    w.out.reset(new unsigned char[Impl::kBufferBytes]);
    // windowBits 15 (a 32 KiB window, the largest) gives a zlib stream; +16 a gzip one.
    const int window_bits = compression == Compression::kGzip ? 16 + 15 : 15;
    DIST_CHECK(deflateInit2(&w.zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, window_bits, 8,
                            Z_DEFAULT_STRATEGY) == Z_OK,
               DataError, "TFRecordWriter(", w.path, "): zlib could not allocate its state");
    w.deflating = true;
  }
  try {
    w.file = env->new_writable_file(w.partial);
  } catch (...) {
    if (w.deflating) deflateEnd(&w.zs);
    w.deflating = false;
    throw;
  }
}

TFRecordWriter::~TFRecordWriter() {
  Impl& w = *impl_;
  if (w.deflating) deflateEnd(&w.zs);
  if (w.closed) return;
  // Not closed: an error or an exception in the caller. Leave nothing behind that looks like
  // output; errors here cannot be reported (a destructor) and change nothing for the caller.
  w.file.reset();
  try {
    w.env->remove_file(w.partial);
  } catch (const Error&) {
  }
}

void TFRecordWriter::write(std::string_view record) {
  Impl& w = *impl_;
  DIST_CHECK_ARG(!w.closed, "TFRecordWriter: write() after close() of ", w.path);
  DIST_CHECK_ARG(!w.failed, "TFRecordWriter: write() after an error writing ", w.partial);
  DIST_CHECK_ARG(record.size() <= data::detail::kMaxRecordBytes, "TFRecordWriter(", w.path,
                 "): record ", w.records, " has ", record.size(), " bytes, more than the ",
                 data::detail::kMaxRecordBytes, " (2 GiB) TFRecord readers here accept");
  char header[12];
  const uint64_t length = record.size();
  std::memcpy(header, &length, 8);  // little-endian host, as the format
  const uint32_t length_crc = masked_crc32c(header, 8);
  std::memcpy(header + 8, &length_crc, 4);
  const uint32_t data_crc = masked_crc32c(record.data(), record.size());
  char footer[4];
  std::memcpy(footer, &data_crc, 4);
  try {
    w.emit(header, sizeof header);
    w.emit(record.data(), record.size());
    w.emit(footer, sizeof footer);
  } catch (...) {
    w.failed = true;
    throw;
  }
  ++w.records;
}

void TFRecordWriter::close() {
  Impl& w = *impl_;
  if (w.closed) return;
  DIST_CHECK_ARG(!w.failed, "TFRecordWriter: close() after an error writing ", w.partial);
  try {
    w.flush_staged();
    if (w.deflating) {
      w.pass(nullptr, 0, Z_FINISH);
      deflateEnd(&w.zs);
      w.deflating = false;
    }
    w.file->flush();
    w.file->sync();
    w.file->close();
    w.env->rename_file(w.partial, w.path);
  } catch (...) {
    w.failed = true;
    throw;
  }
  w.closed = true;  // the file is in place: nothing to remove any more
  w.env->sync_dir(parent_dir(w.path));
}

const std::string& TFRecordWriter::path() const { return impl_->path; }

int64_t TFRecordWriter::records() const { return impl_->records; }

}  // namespace dist::data
