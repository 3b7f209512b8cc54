// FaultEnv: an Env over a MemoryEnv whose chosen files fail as a disk or another process would
// make them fail, for the data readers' fault tests (reader_faults_test.cc).
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "dist/core/env.h"
#include "dist/core/error.h"
#include "dist/core/memory_env.h"

namespace dist::testing {

enum class Fault {
  kShortRead,  // the file ends at byte `at` (it shrank after it was opened)
  kReadError,  // a read that covers byte `at` fails with EIO
  kVanish,     // removed right after a listing shows it, or when opened, whichever is first
};

class FaultEnv : public EnvWrapper {
 public:
  explicit FaultEnv(MemoryEnv* memory) : EnvWrapper(memory), memory_(memory) {}

  void inject(const std::string& path, Fault fault, uint64_t at = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    faults_[path] = {fault, at};
  }
  // Listing `dir` fails with EIO from now on.
  void fail_listing(const std::string& dir) {
    std::lock_guard<std::mutex> lock(mu_);
    failing_dirs_.insert(dir);
  }
  // A file with the bytes given, through the MemoryEnv, without a fault (until inject).
  void put(const std::string& path, const std::string& bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      faults_.erase(path);
    }
    auto file = memory_->new_writable_file(path);
    file->append(bytes.data(), bytes.size());
    file->close();
  }

  std::vector<std::string> get_children(const std::string& dir) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failing_dirs_.count(dir) > 0)
        throw DataError("listing directory '" + dir + "' failed: Input/output error");
    }
    auto names = EnvWrapper::get_children(dir);
    for (const auto& name : names) vanish_if_asked(dir + "/" + name);
    return names;
  }

  std::unique_ptr<RandomAccessFile> new_random_access_file(const std::string& path) override {
    vanish_if_asked(path);
    auto file = EnvWrapper::new_random_access_file(path);
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = faults_.find(path);
    if (it == faults_.end()) return file;
    return std::make_unique<FaultyFile>(std::move(file), path, it->second);
  }

 private:
  struct Injected {
    Fault fault;
    uint64_t at;
  };

  class FaultyFile : public RandomAccessFile {
   public:
    FaultyFile(std::unique_ptr<RandomAccessFile> file, std::string path, Injected injected)
        : file_(std::move(file)), path_(std::move(path)), injected_(injected) {}
    uint64_t size() const override { return file_->size(); }
    void read(uint64_t offset, size_t size, void* out) const override {
      const uint64_t at = injected_.at;
      if (injected_.fault == Fault::kShortRead && offset + size > at)
        throw DataError("reading '" + path_ + "' failed: unexpected end of file");
      if (injected_.fault == Fault::kReadError && offset <= at && at < offset + size)
        throw DataError("reading '" + path_ + "' failed: Input/output error");
      file_->read(offset, size, out);
    }

   private:
    std::unique_ptr<RandomAccessFile> file_;
    std::string path_;
    Injected injected_;
  };

  void vanish_if_asked(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = faults_.find(path);
    if (it == faults_.end() || it->second.fault != Fault::kVanish) return;
    faults_.erase(it);
    memory_->remove_file(path);
  }

  MemoryEnv* memory_;
  std::mutex mu_;
  std::map<std::string, Injected> faults_;
  std::set<std::string> failing_dirs_;
};

}  // namespace dist::testing
