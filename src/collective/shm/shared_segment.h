// SharedSegment: one POSIX shared-memory segment (/dev/shm) mapped into this process.
//
// The creator makes it under a fresh random name (O_EXCL, mode 0600) and reserves its memory
// with posix_fallocate, so a /dev/shm too small for it is an error at creation instead of a
// SIGBUS at the first touch of a page. Others map it by name. The creator removes the name
// (unlink) once everyone mapped it, so nothing is left in /dev/shm however the job ends; the
// mapping lives until the last SharedSegment of it in this process is destroyed.
#pragma once

#include <cstddef>
#include <string>

namespace dist::collective {

class SharedSegment {
 public:
  // Throws std::runtime_error with the system's reason when it refuses.
  static SharedSegment create(size_t bytes);
  static SharedSegment open(const std::string& name);

  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&&) = delete;
  SharedSegment(const SharedSegment&) = delete;
  ~SharedSegment();

  const std::string& name() const { return name_; }
  void* data() const { return base_; }
  size_t bytes() const { return bytes_; }
  // Removes the name (the creator, once every process mapped it); the mapping stays.
  void unlink();

 private:
  SharedSegment(std::string name, void* base, size_t bytes, bool linked)
      : name_(std::move(name)), base_(base), bytes_(bytes), linked_(linked) {}

  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  bool linked_ = false;  // this process created the name and has not unlinked it yet
};

}  // namespace dist::collective
