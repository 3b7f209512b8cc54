// MemoryEnv: an Env (env.h) whose files live in this process's memory, like TensorFlow's ram://
// file system. An elastic job keeps its committed training states in one (a Checkpoint writes
// through any Env), so a resize restores them without touching a disk; tests use it too.
//
// Paths are plain strings split at '/'; a file's parent directories exist once created
// (create_dirs) or once a file under them was written. sync() and sync_dir() do nothing: memory
// is as durable as it gets, and gone with the process.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "dist/core/env.h"

namespace dist {

class MemoryEnv : public Env {
 public:
  std::unique_ptr<WritableFile> new_writable_file(const std::string& path) override;
  std::unique_ptr<WritableFile> new_appendable_file(const std::string& path) override;
  std::unique_ptr<RandomAccessFile> new_random_access_file(const std::string& path) override;
  bool file_exists(const std::string& path) override;
  FileInfo file_info(const std::string& path) override;
  std::vector<std::string> get_children(const std::string& dir) override;
  void remove_file(const std::string& path) override;
  void create_dirs(const std::string& dir) override;
  void rename_file(const std::string& from, const std::string& to) override;
  void sync_dir(const std::string&) override {}

  // Bytes held by all files, for messages ("kept 3.2 MiB in memory").
  int64_t bytes() const;

 private:
  friend class MemoryWritableFile;
  using Contents = std::shared_ptr<const std::string>;
  void store(const std::string& path, std::string contents);
  void add_parents(const std::string& path);  // with mu_ held

  mutable std::mutex mu_;
  std::map<std::string, Contents> files_;
  std::set<std::string> dirs_;
};

}  // namespace dist
