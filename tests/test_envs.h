// Envs for tests, over the real file system: one that logs every operation, one whose disk
// fills up. See include/dist/core/env.h.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/core/env.h"
#include "dist/core/error.h"

namespace dist::testing {

// Logs each operation as "<operation> <path>" (paths relative to `root`, this process's id
// shown as <pid>), appends as "append <path> <bytes>", and keeps every byte appended per file.
class RecordingEnv : public EnvWrapper {
 public:
  explicit RecordingEnv(std::string root) : EnvWrapper(Env::Default()), root_(std::move(root)) {}

  std::vector<std::string> operations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return operations_;
  }
  // Everything appended to `path` (absolute) through this Env, in order.
  std::string appended(const std::string& path) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string bytes;
    for (const auto& [file, data] : appended_)
      if (file == path) bytes += data;
    return bytes;
  }

  std::unique_ptr<WritableFile> new_writable_file(const std::string& path) override {
    log("new_writable_file " + relative(path));
    return std::make_unique<File>(this, path, EnvWrapper::new_writable_file(path));
  }
  std::unique_ptr<RandomAccessFile> new_random_access_file(const std::string& path) override {
    log("new_random_access_file " + relative(path));
    return EnvWrapper::new_random_access_file(path);
  }
  bool file_exists(const std::string& path) override {
    log("file_exists " + relative(path));
    return EnvWrapper::file_exists(path);
  }
  std::vector<std::string> get_children(const std::string& dir) override {
    log("get_children " + relative(dir));
    return EnvWrapper::get_children(dir);
  }
  void remove_file(const std::string& path) override {
    log("remove_file " + relative(path));
    EnvWrapper::remove_file(path);
  }
  void create_dirs(const std::string& dir) override {
    log("create_dirs " + relative(dir));
    EnvWrapper::create_dirs(dir);
  }
  void rename_file(const std::string& from, const std::string& to) override {
    log("rename_file " + relative(from) + " " + relative(to));
    EnvWrapper::rename_file(from, to);
  }
  void sync_dir(const std::string& dir) override {
    log("sync_dir " + relative(dir));
    EnvWrapper::sync_dir(dir);
  }

 private:
  class File : public WritableFile {
   public:
    File(RecordingEnv* env, std::string path, std::unique_ptr<WritableFile> file)
        : env_(env), path_(std::move(path)), file_(std::move(file)) {}
    void append(const void* data, size_t size) override {
      env_->log("append " + env_->relative(path_) + " " + std::to_string(size));
      {
        std::lock_guard<std::mutex> lock(env_->mutex_);
        env_->appended_.emplace_back(path_, std::string(static_cast<const char*>(data), size));
      }
      file_->append(data, size);
    }
    void flush() override {
      env_->log("flush " + env_->relative(path_));
      file_->flush();
    }
    void sync() override {
      env_->log("sync " + env_->relative(path_));
      file_->sync();
    }
    void close() override {
      env_->log("close " + env_->relative(path_));
      file_->close();
    }

   private:
    RecordingEnv* env_;
    std::string path_;
    std::unique_ptr<WritableFile> file_;
  };

  std::string relative(std::string path) const {
    if (path.compare(0, root_.size(), root_) == 0) {
      path = path.substr(root_.size());
      if (path.empty()) path = ".";
      if (path[0] == '/') path = path.substr(1);
    }
    const std::string pid = std::to_string(::getpid());
    const auto at = path.rfind(pid);
    if (at != std::string::npos && at + pid.size() == path.size())
      path.replace(at, pid.size(), "<pid>");
    return path;
  }
  void log(const std::string& operation) {
    std::lock_guard<std::mutex> lock(mutex_);
    operations_.push_back(operation);
  }

  std::string root_;
  mutable std::mutex mutex_;
  std::vector<std::string> operations_;
  std::vector<std::pair<std::string, std::string>> appended_;  // (path, bytes)
};

// A disk with `capacity` free bytes, shared by every file written through this Env: an append
// past it writes what fits and then fails as write(2) does on a full disk (ENOSPC).
class DiskFullEnv : public EnvWrapper {
 public:
  explicit DiskFullEnv(uint64_t capacity) : EnvWrapper(Env::Default()), free_(capacity) {}

  std::unique_ptr<WritableFile> new_writable_file(const std::string& path) override {
    return std::make_unique<File>(this, path, EnvWrapper::new_writable_file(path));
  }

 private:
  class File : public WritableFile {
   public:
    File(DiskFullEnv* env, std::string path, std::unique_ptr<WritableFile> file)
        : env_(env), path_(std::move(path)), file_(std::move(file)) {}
    void append(const void* data, size_t size) override {
      size_t fits = 0;
      {
        std::lock_guard<std::mutex> lock(env_->mutex_);
        fits = static_cast<size_t>(std::min<uint64_t>(size, env_->free_));
        env_->free_ -= fits;
      }
      file_->append(data, fits);
      if (fits < size) throw DataError("writing '" + path_ + "' failed: " + std::strerror(ENOSPC));
    }
    void flush() override { file_->flush(); }
    void sync() override { file_->sync(); }
    void close() override { file_->close(); }

   private:
    DiskFullEnv* env_;
    std::string path_;
    std::unique_ptr<WritableFile> file_;
  };

  std::mutex mutex_;
  uint64_t free_;
};

}  // namespace dist::testing
