#include "train/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "dist/core/error.h"

namespace dist::detail {
namespace {

[[noreturn]] void throw_write_error(const char* what, const std::string& path,
                                    const std::string& step, int err) {
  throw Error(concat("cannot write ", what, " '", path, "': ", step,
                     " failed: ", err == 0 ? "unexpected end of file" : std::strerror(err)));
}

}  // namespace

bool write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

std::string temporary_path(const std::string& path) { return concat(path, ".tmp.", ::getpid()); }

void write_file_atomically(const std::string& path, const char* what,
                           const std::function<bool(int fd)>& write,
                           const std::function<void(const char* stage)>& at_stage) {
  const std::string temp = temporary_path(path);
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_write_error(what, path, "creating '" + temp + "'", errno);
  auto fail = [&](const std::string& step) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    throw_write_error(what, path, step, err);
  };
  if (!write(fd)) fail("writing '" + temp + "'");
  if (at_stage) at_stage("after_data");
  if (::fsync(fd) != 0) fail("fsync of '" + temp + "'");
  const int closing = fd;
  fd = -1;
  if (::close(closing) != 0) fail("closing '" + temp + "'");
  if (at_stage) at_stage("before_rename");
  if (::rename(temp.c_str(), path.c_str()) != 0) fail("renaming '" + temp + "' to it");

  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) throw_write_error(what, path, "opening directory '" + dir + "'", errno);
  const bool synced = ::fsync(dir_fd) == 0;
  const int err = errno;
  ::close(dir_fd);
  if (!synced) throw_write_error(what, path, "fsync of directory '" + dir + "'", err);
}

}  // namespace dist::detail
