#include "dist/core/memory_env.h"

#include <cstring>

#include "dist/core/error.h"

namespace dist {

// Collects the bytes and hands them to the Env on close(), or on destruction without close()
// (a POSIX file keeps what was written too): a reader never sees a file mid-append.
class MemoryWritableFile : public WritableFile {
 public:
  MemoryWritableFile(MemoryEnv* env, std::string path, std::string bytes = {})
      : env_(env), path_(std::move(path)), bytes_(std::move(bytes)) {}
  ~MemoryWritableFile() override {
    if (env_ != nullptr) env_->store(path_, std::move(bytes_));
  }
  void append(const void* data, size_t size) override {
    check_open("append");
    bytes_.append(static_cast<const char*>(data), size);
  }
  void flush() override { check_open("flush"); }
  void sync() override { check_open("sync"); }
  void close() override {
    check_open("close");
    env_->store(path_, std::move(bytes_));
    env_ = nullptr;
  }

 private:
  void check_open(const char* call) const {
    DIST_INTERNAL_ASSERT(env_ != nullptr, "WritableFile::", call, " on '", path_,
                         "' after close()");
  }
  MemoryEnv* env_;
  std::string path_;
  std::string bytes_;
};

namespace {

class MemoryRandomAccessFile : public RandomAccessFile {
 public:
  MemoryRandomAccessFile(std::string path, std::shared_ptr<const std::string> bytes)
      : path_(std::move(path)), bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_->size(); }
  void read(uint64_t offset, size_t size, void* out) const override {
    if (offset > bytes_->size() || size > bytes_->size() - offset)
      throw DataError(detail::concat("reading '", path_, "' failed: unexpected end of file"));
    std::memcpy(out, bytes_->data() + offset, size);
  }

 private:
  std::string path_;
  std::shared_ptr<const std::string> bytes_;  // the file as it was when opened
};

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos || slash == 0 ? std::string() : path.substr(0, slash);
}

}  // namespace

void MemoryEnv::add_parents(const std::string& path) {
  for (std::string dir = parent_of(path); !dir.empty(); dir = parent_of(dir)) dirs_.insert(dir);
}

void MemoryEnv::store(const std::string& path, std::string contents) {
  std::lock_guard<std::mutex> lock(mu_);
  add_parents(path);
  files_[path] = std::make_shared<const std::string>(std::move(contents));
}

std::unique_ptr<WritableFile> MemoryEnv::new_writable_file(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dirs_.count(path) > 0)
      throw DataError(detail::concat("opening '", path, "' for writing failed: Is a directory"));
  }
  store(path, {});  // created (or truncated) now, as open(2) would
  return std::make_unique<MemoryWritableFile>(this, path);
}

std::unique_ptr<WritableFile> MemoryEnv::new_appendable_file(const std::string& path) {
  std::string existing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dirs_.count(path) > 0)
      throw DataError(detail::concat("opening '", path, "' for appending failed: Is a directory"));
    const auto it = files_.find(path);
    if (it != files_.end()) existing = *it->second;
  }
  store(path, existing);  // created now if missing, as open(2) with O_CREAT would
  return std::make_unique<MemoryWritableFile>(this, path, std::move(existing));
}

std::unique_ptr<RandomAccessFile> MemoryEnv::new_random_access_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = files_.find(path);
  if (it == files_.end())
    throw DataError(detail::concat("opening '", path, "' failed: No such file or directory"));
  return std::make_unique<MemoryRandomAccessFile>(path, it->second);
}

bool MemoryEnv::file_exists(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.count(path) > 0 || dirs_.count(path) > 0;
}

FileInfo MemoryEnv::file_info(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  FileInfo info;
  if (const auto it = files_.find(path); it != files_.end()) {
    info.kind = FileKind::kRegular;
    info.size = it->second->size();
  } else if (dirs_.count(path) > 0) {
    info.kind = FileKind::kDirectory;
  } else {
    return info;
  }
  info.identity = path;  // no links here: a path is its own identity
  return info;
}

std::vector<std::string> MemoryEnv::get_children(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dirs_.count(dir) == 0)
    throw DataError(detail::concat("listing '", dir, "' failed: No such file or directory"));
  std::vector<std::string> names;
  const std::string prefix = dir + "/";
  auto add_direct = [&](const std::string& path) {
    if (path.rfind(prefix, 0) == 0 && path.find('/', prefix.size()) == std::string::npos)
      names.push_back(path.substr(prefix.size()));
  };
  for (const auto& [path, bytes] : files_) add_direct(path);
  for (const auto& path : dirs_) add_direct(path);
  return names;
}

void MemoryEnv::remove_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (files_.erase(path) == 0)
    throw DataError(detail::concat("removing '", path, "' failed: No such file or directory"));
}

void MemoryEnv::create_dirs(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  if (files_.count(dir) > 0)
    throw DataError(detail::concat("creating directory '", dir, "' failed: File exists"));
  dirs_.insert(dir);
  add_parents(dir);
}

void MemoryEnv::rename_file(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = files_.find(from);
  if (it == files_.end())
    throw DataError(
        detail::concat("renaming '", from, "' to '", to, "' failed: No such file or directory"));
  Contents bytes = it->second;
  files_.erase(it);
  add_parents(to);
  files_[to] = std::move(bytes);
}

int64_t MemoryEnv::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t total = 0;
  for (const auto& [path, bytes] : files_) total += static_cast<int64_t>(bytes->size());
  return total;
}

}  // namespace dist
