// Env::Default(): the POSIX file system.
#include "dist/core/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "dist/core/error.h"

namespace dist {
namespace {

// "<doing> '<path>' failed: <reason>"; errno 0 stands for a short read.
[[noreturn]] void fail(const std::string& doing, const std::string& path, int err) {
  throw DataError(detail::concat(
      doing, " '", path, "' failed: ", err == 0 ? "unexpected end of file" : std::strerror(err)));
}

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void append(const void* data, size_t size) override {
    check_open("append");
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd_, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("writing", path_, errno);
      p += n;
      size -= static_cast<size_t>(n);
    }
  }
  void flush() override { check_open("flush"); }  // append does not buffer
  void sync() override {
    check_open("sync");
    if (::fsync(fd_) != 0) fail("fsync of", path_, errno);
  }
  void close() override {
    check_open("close");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("closing", path_, errno);
  }

 private:
  void check_open(const char* call) const {
    DIST_INTERNAL_ASSERT(fd_ >= 0, "WritableFile::", call, " on '", path_, "' after close()");
  }

  std::string path_;
  int fd_;
};

class PosixRandomAccessFile : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  uint64_t size() const override { return size_; }
  void read(uint64_t offset, size_t size, void* out) const override {
    char* p = static_cast<char*>(out);
    while (size > 0) {
      const ssize_t n = ::pread(fd_, p, size, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("reading", path_, n == 0 ? 0 : errno);
      p += n;
      size -= static_cast<size_t>(n);
      offset += static_cast<uint64_t>(n);
    }
  }

 private:
  std::string path_;
  int fd_;
  uint64_t size_;
};

// The kind of file a stat mode describes.
FileKind kind_of(mode_t mode) {
  if (S_ISREG(mode)) return FileKind::kRegular;
  if (S_ISDIR(mode)) return FileKind::kDirectory;
  if (S_ISFIFO(mode)) return FileKind::kFifo;
  if (S_ISSOCK(mode)) return FileKind::kSocket;
  if (S_ISCHR(mode) || S_ISBLK(mode)) return FileKind::kDevice;
  return FileKind::kOther;
}

// Opens `path` with `flags` without blocking (open(2) of a FIFO waits for its other end, forever
// for a writer with no reader) and refuses anything but a regular file before a byte is read or
// written (O_TRUNC does nothing to a device or a FIFO, so nothing there has changed yet);
// returns the descriptor, blocking again, and the file's size. `doing` and `instead` make the
// errors: "<doing> '<path>' refused: ...; <instead>".
int open_regular(const std::string& path, int flags, const char* doing, const char* instead,
                 uint64_t* size) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0) fail(doing, path, errno);
  struct stat st {};
  const bool stated = ::fstat(fd, &st) == 0;
  const int err = errno;
  if (!stated || !S_ISREG(st.st_mode)) {
    ::close(fd);
    if (!stated) fail("stat of", path, err);
    throw DataError(detail::concat(doing, " '", path, "' refused: it is not a regular file but ",
                                   file_kind_phrase(kind_of(st.st_mode)), "; ", instead));
  }
  // Regular files ignore O_NONBLOCK; cleared all the same, so nothing depends on that.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

// Opens `path` for writing with `flags` (O_TRUNC or O_APPEND) added.
std::unique_ptr<WritableFile> open_regular_for_writing(const std::string& path, int flags,
                                                       const char* doing) {
  uint64_t size = 0;
  const int fd =
      open_regular(path, O_WRONLY | O_CREAT | flags, doing, "write to a regular file", &size);
  return std::make_unique<PosixWritableFile>(path, fd);
}

class PosixEnv : public Env {
 public:
  std::unique_ptr<WritableFile> new_writable_file(const std::string& path) override {
    return open_regular_for_writing(path, O_TRUNC, "creating");
  }

  std::unique_ptr<WritableFile> new_appendable_file(const std::string& path) override {
    return open_regular_for_writing(path, O_APPEND, "opening for appending");
  }

  std::unique_ptr<RandomAccessFile> new_random_access_file(const std::string& path) override {
    uint64_t size = 0;
    const int fd = open_regular(path, O_RDONLY, "opening", "read a regular file", &size);
    return std::make_unique<PosixRandomAccessFile>(path, fd, size);
  }

  bool file_exists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  FileInfo file_info(const std::string& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return {};
      fail("stat of", path, errno);
    }
    FileInfo info;
    info.kind = kind_of(st.st_mode);
    info.size = info.kind == FileKind::kRegular ? static_cast<uint64_t>(st.st_size) : 0;
    info.identity = detail::concat(st.st_dev, ":", st.st_ino);
    return info;
  }

  std::vector<std::string> get_children(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) fail("listing directory", dir, errno);
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* entry = ::readdir(d)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    const int err = errno;
    ::closedir(d);
    if (err != 0) fail("listing directory", dir, err);
    return names;
  }

  void remove_file(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) fail("removing", path, errno);
  }

  void create_dirs(const std::string& dir) override {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) fail("creating directory", dir, error.value());
    // create_directories accepts an existing non-directory at `dir` on some libraries.
    if (!std::filesystem::is_directory(dir, error)) fail("creating directory", dir, ENOTDIR);
  }

  void rename_file(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      const int err = errno;
      throw DataError(
          detail::concat("renaming '", from, "' to '", to, "' failed: ", std::strerror(err)));
    }
  }

  void sync_dir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fail("opening directory", dir, errno);
    const bool synced = ::fsync(fd) == 0;
    const int err = errno;
    ::close(fd);
    if (!synced) fail("fsync of directory", dir, err);
  }
};

// Streams a RandomAccessFile: reads at an offset that advances, up to the size at opening.
class RandomAccessStream : public SequentialFile {
 public:
  explicit RandomAccessStream(std::unique_ptr<RandomAccessFile> file)
      : file_(std::move(file)), size_(file_->size()) {}
  size_t read(void* out, size_t size) override {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(size, size_ - offset_));
    if (n > 0) file_->read(offset_, n, out);  // throws if the file shrank
    offset_ += n;
    return n;
  }
  uint64_t skip(uint64_t size) override {
    const uint64_t n = std::min(size, size_ - offset_);
    offset_ += n;
    return n;
  }

 private:
  std::unique_ptr<RandomAccessFile> file_;
  uint64_t size_;
  uint64_t offset_ = 0;
};

}  // namespace

const char* file_kind_phrase(FileKind kind) {
  switch (kind) {
    case FileKind::kMissing:
      return "nothing (missing)";
    case FileKind::kRegular:
      return "a regular file";
    case FileKind::kDirectory:
      return "a directory";
    case FileKind::kFifo:
      return "a FIFO (named pipe)";
    case FileKind::kSocket:
      return "a socket";
    case FileKind::kDevice:
      return "a device";
    case FileKind::kOther:
      break;
  }
  return "another kind of file";
}

std::unique_ptr<SequentialFile> sequential_reader(std::unique_ptr<RandomAccessFile> file) {
  return std::make_unique<RandomAccessStream>(std::move(file));
}

Env* Env::Default() {
  static Env* const env = new PosixEnv;  // never deleted: usable from static destructors
  return env;
}

}  // namespace dist
