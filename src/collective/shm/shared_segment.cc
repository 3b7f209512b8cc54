#include "collective/shm/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <stdexcept>

#include "dist/core/error.h"

namespace dist::collective {
namespace {

std::string errno_text(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

// Maps `fd` and closes it (the mapping keeps the memory).
void* map(int fd, size_t bytes) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  ::close(fd);
  if (base == MAP_FAILED) {
    errno = error;
    throw std::runtime_error(errno_text("mmap"));
  }
  return base;
}

}  // namespace

SharedSegment SharedSegment::create(size_t bytes) {
  DIST_CHECK_ARG(bytes > 0, "a shared-memory segment needs at least one byte");
  std::random_device random;
  const std::string name = detail::concat("/dist-", getpid(), "-", random(), random());
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw std::runtime_error(errno_text("shm_open"));
  const int reserved = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (reserved != 0) {
    ::close(fd);
    shm_unlink(name.c_str());
    throw std::runtime_error(
        detail::concat("reserving ", bytes, " bytes in /dev/shm: ", std::strerror(reserved)));
  }
  try {
    return SharedSegment(name, map(fd, bytes), bytes, /*linked=*/true);
  } catch (...) {
    shm_unlink(name.c_str());
    throw;
  }
}

SharedSegment SharedSegment::open(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) throw std::runtime_error(errno_text("shm_open") + " (" + name + ")");
  struct stat s {};
  if (fstat(fd, &s) != 0 || s.st_size <= 0) {
    ::close(fd);
    throw std::runtime_error("the shared-memory segment " + name + " is empty");
  }
  const auto bytes = static_cast<size_t>(s.st_size);
  return SharedSegment(name, map(fd, bytes), bytes, /*linked=*/false);
}

SharedSegment::SharedSegment(SharedSegment&& other) noexcept
    : name_(std::move(other.name_)),
      base_(other.base_),
      bytes_(other.bytes_),
      linked_(other.linked_) {
  other.base_ = nullptr;
  other.linked_ = false;
}

SharedSegment::~SharedSegment() {
  unlink();
  if (base_ != nullptr) munmap(base_, bytes_);
}

void SharedSegment::unlink() {
  if (linked_) shm_unlink(name_.c_str());
  linked_ = false;
}

}  // namespace dist::collective
