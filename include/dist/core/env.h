// Env: the library's one seam to the file system, after LevelDB's Env. Checkpoints, their
// pointer file, safetensors files and summary writers do all their file I/O through an Env*,
// and so do the data readers (TFRecord files, IDX and CIFAR-10 files plain or gzip, image
// folders, file patterns): a test can pass an Env that fails or kills the process at a chosen
// operation (a full disk, a crash before a rename, a short read, an EIO, a file that vanishes
// between listing and opening) while the code under test stays the production code.
//
//   dist::Env* env = dist::Env::Default();  // the POSIX file system
//   auto file = env->new_writable_file("dir/x.tmp");
//   file->append(bytes.data(), bytes.size());
//   file->sync();
//   file->close();
//   env->rename_file("dir/x.tmp", "dir/x");
//   env->sync_dir("dir");
//
// To change one operation, derive from EnvWrapper and override only that one. Every read goes
// through new_random_access_file: streaming (sequential_reader below) and decompressing
// (src/core/inflating_file.h) are built over it, so one override there reaches every reader.
//
// Errors: every operation throws DataError naming the path(s), the operation and the system's
// reason ("writing 'ckpt/c.tmp.7' failed: No space left on device"). Paths are used as given
// (relative ones against the working directory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dist {

// A file being written from its start. Not thread-safe: one thread at a time.
// Destroying it closes it if close() was not called, ignoring errors.
class WritableFile {
 public:
  virtual ~WritableFile() = default;

  // Appends `size` bytes at the end. After an error the file's length and content are
  // unspecified; the caller should remove it.
  virtual void append(const void* data, size_t size) = 0;
  // Hands appended bytes to the operating system, so other processes read them; not durable
  // yet. (The POSIX file does not buffer: a no-op there.)
  virtual void flush() = 0;
  // Makes everything appended durable: on disk when sync() returns (fsync).
  virtual void sync() = 0;
  // Flushes and closes; no call but the destructor is allowed after it. Reports errors a
  // file system delays to close (such as a failed deferred write).
  virtual void close() = 0;
};

// A file read at arbitrary offsets. Thread-safe: concurrent reads are allowed.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;

  // The file's length in bytes when it was opened.
  virtual uint64_t size() const = 0;
  // Reads exactly `size` bytes at `offset` into `out`; DataError if the file ends before
  // ("unexpected end of file") or the read fails.
  virtual void read(uint64_t offset, size_t size, void* out) const = 0;
};

// A file read from its start, in order: a stream over a RandomAccessFile (sequential_reader).
// Not thread-safe: one thread at a time.
class SequentialFile {
 public:
  virtual ~SequentialFile() = default;

  // Reads up to `size` bytes into `out`: fewer only at the end of the content, 0 there.
  // DataError naming the file if the read fails, or if the file ends before the size it had
  // when opened (it shrank since: "unexpected end of file").
  virtual size_t read(void* out, size_t size) = 0;
  // Passes over up to `size` bytes without reading them (where the file allows, as a plain
  // file does); returns how many, fewer only at the end of the content.
  virtual uint64_t skip(uint64_t size) = 0;
};

// The bytes of `file` in order from its start up to the size it had when opened: streaming
// over any Env's files, so a fault injected into new_random_access_file reaches the readers.
std::unique_ptr<SequentialFile> sequential_reader(std::unique_ptr<RandomAccessFile> file);

// What is at a path (symbolic links followed), from Env::file_info.
enum class FileKind { kMissing, kRegular, kDirectory, kFifo, kSocket, kDevice, kOther };
// The kind as the object of "is", for messages: "a directory", "a FIFO (named pipe)".
const char* file_kind_phrase(FileKind kind);

struct FileInfo {
  FileKind kind = FileKind::kMissing;
  // A regular file's length in bytes; 0 for anything else.
  uint64_t size = 0;
  // Equal for two paths that reach the same file or directory (POSIX: device and inode), so a
  // walk can notice a folder reached twice through links; "" when missing.
  std::string identity;
};

// The file-system operations the library uses. Implementations must be thread-safe: the
// library calls one Env from several threads (each on its own files). An Env is not owned by
// the objects it is passed to: it must outlive them.
class Env {
 public:
  virtual ~Env() = default;

  // The POSIX file system. A process-lifetime singleton, never deleted; thread-safe.
  static Env* Default();

  // Creates `path`, or truncates it if it exists, for writing (mode 0644 less the umask).
  // DataError, with nothing written, when `path` is something other than a regular file (a
  // device node, a FIFO, a socket): the POSIX Env opens without blocking and looks first.
  virtual std::unique_ptr<WritableFile> new_writable_file(const std::string& path) = 0;
  // Opens `path` for appending at its end, creating it if it is missing: for logs that grow
  // by a line at a time (CSVLogger, dist-train's metrics.jsonl). DataError as above for
  // anything but a regular file.
  virtual std::unique_ptr<WritableFile> new_appendable_file(const std::string& path) = 0;
  // Opens an existing `path` for reading; DataError if it is missing or unreadable, or is not
  // a regular file (a directory, a FIFO, a device): the POSIX Env opens without blocking and
  // looks first, so a FIFO among data files fails at once instead of waiting for a writer.
  // Every reader of the library opens its files here (sequential_reader streams them).
  virtual std::unique_ptr<RandomAccessFile> new_random_access_file(const std::string& path) = 0;
  // Whether something (a file or a directory) exists at `path`. Never throws.
  virtual bool file_exists(const std::string& path) = 0;
  // What is at `path`, links followed: kMissing when nothing is (or a link points at nothing);
  // DataError naming the path when it cannot be looked at (a parent that cannot be searched).
  virtual FileInfo file_info(const std::string& path) = 0;
  // The names (not paths) of the entries of directory `dir`, without "." and "..", in no
  // particular order; DataError if `dir` is missing or not a directory.
  virtual std::vector<std::string> get_children(const std::string& dir) = 0;
  // Removes the file `path`; DataError if it is missing or cannot be removed.
  virtual void remove_file(const std::string& path) = 0;
  // Creates directory `dir` and any missing parents; nothing if it exists as a directory;
  // DataError if it, or a parent, exists as something else or cannot be created.
  virtual void create_dirs(const std::string& dir) = 0;
  // Renames `from` to `to` atomically, replacing `to` if it is a file (POSIX rename(2)).
  virtual void rename_file(const std::string& from, const std::string& to) = 0;
  // Makes the directory's entries durable (fsync of the directory): after creating or
  // renaming a file in it, for the new name to survive a power cut.
  virtual void sync_dir(const std::string& dir) = 0;
};

// An Env that forwards every call to another one: derive from it to change a few operations
// (fault injection in tests). Does not own `target`, which must outlive it.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }

  std::unique_ptr<WritableFile> new_writable_file(const std::string& path) override {
    return target_->new_writable_file(path);
  }
  std::unique_ptr<WritableFile> new_appendable_file(const std::string& path) override {
    return target_->new_appendable_file(path);
  }
  std::unique_ptr<RandomAccessFile> new_random_access_file(const std::string& path) override {
    return target_->new_random_access_file(path);
  }
  bool file_exists(const std::string& path) override { return target_->file_exists(path); }
  FileInfo file_info(const std::string& path) override { return target_->file_info(path); }
  std::vector<std::string> get_children(const std::string& dir) override {
    return target_->get_children(dir);
  }
  void remove_file(const std::string& path) override { target_->remove_file(path); }
  void create_dirs(const std::string& dir) override { target_->create_dirs(dir); }
  void rename_file(const std::string& from, const std::string& to) override {
    target_->rename_file(from, to);
  }
  void sync_dir(const std::string& dir) override { target_->sync_dir(dir); }

 private:
  Env* target_;
};

}  // namespace dist
