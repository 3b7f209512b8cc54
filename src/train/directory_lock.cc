#include "dist/train/directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "dist/core/error.h"

namespace dist {
namespace {

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown host";
  return name;
}

// What the holder wrote into the lock file ("host H, pid P"), or a plain phrase if unreadable.
std::string holder_of(int fd) {
  char text[512] = {};
  const ssize_t got = ::pread(fd, text, sizeof text - 1, 0);
  std::string holder = got > 0 ? std::string(text, static_cast<size_t>(got)) : "";
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\r')) holder.pop_back();
  return holder.empty() ? "another process" : holder;
}

}  // namespace

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& purpose)
    : path_((std::filesystem::path(dir) / ".dist-lock").string()) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    throw DataError(detail::concat("cannot create the directory ", dir, " for ", purpose, ": ",
                                   error.message()));
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0)
    throw DataError(detail::concat("cannot make the lock file ", path_, " for ", purpose, ": ",
                                   std::strerror(errno)));
  int status;
  do {
    status = ::flock(fd_, LOCK_EX | LOCK_NB);
  } while (status != 0 && errno == EINTR);
  if (status != 0) {
    const int reason = errno;
    const std::string holder = holder_of(fd_);
    ::close(fd_);
    fd_ = -1;
    if (reason == EWOULDBLOCK)
      throw InvalidArgument(
          detail::concat("the directory ", dir, " is in use by another job (", holder, ", holding ",
                         path_, "): two jobs writing ", purpose,
                         " into one directory would overwrite each other; "
                         "wait for that job to end, or give this one its own directory"));
    throw DataError(
        detail::concat("cannot lock ", path_, " for ", purpose, ": ", std::strerror(reason)));
  }
  const std::string holder = detail::concat("host ", this_host(), ", pid ", ::getpid(), "\n");
  // The note is best effort: without it, a refused job reads "another process".
  const bool noted = ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, holder.data(), holder.size(), 0) ==
                                                     static_cast<ssize_t>(holder.size());
  static_cast<void>(noted);
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

}  // namespace dist
