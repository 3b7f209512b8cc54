#include "dist/core/output_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "dist/core/error.h"

namespace dist {
namespace {

// What a file of this mode is, as the object of "is".
const char* file_kind_phrase(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "another kind of file";
}

// Why a regular file or what stands in its place cannot be replaced; "" when it can.
std::string why_not_replaceable(const struct stat& st) {
  if (!S_ISREG(st.st_mode))
    return std::string("not a regular file but ") + file_kind_phrase(st.st_mode);
  // Nobody may write it: someone made it read-only to keep it. (access(W_OK) would say yes to
  // root, who is the one most likely to destroy a system file.)
  if ((st.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) == 0)
    return "a read-only file (make it writable to have it replaced)";
  return "";
}

// The file a symbolic link finally points at; "" when it points at nothing (or loops).
std::string resolved_link(const std::string& path) {
  std::unique_ptr<char, decltype(&std::free)> real(::realpath(path.c_str(), nullptr), &std::free);
  return real ? std::string(real.get()) : std::string();
}

}  // namespace

std::string why_not_an_output_file(const std::string& path) {
  struct stat link {};
  if (::lstat(path.c_str(), &link) != 0) {
    if (errno == ENOTDIR) return "has a parent that is not a directory";
    return "";  // missing (or unreadable: writing it will say why)
  }
  if (!S_ISLNK(link.st_mode)) {
    const std::string why = why_not_replaceable(link);
    return why.empty() ? why : "is " + why;  // "is not a regular file but a FIFO"
  }
  const std::string target = resolved_link(path);
  struct stat st {};
  if (target.empty() || ::stat(target.c_str(), &st) != 0)
    return "is a symbolic link to nothing (a missing file or a loop of links), not a regular "
           "file";
  const std::string why = why_not_replaceable(st);
  if (why.empty()) return why;
  return "is a symbolic link to " + target + ", which is " + why;
}

std::string output_file_target(const std::string& path, const std::string& what) {
  const std::string why = why_not_an_output_file(path);
  DIST_CHECK_ARG(why.empty(), what, " '", path, "' ", why,
                 "; an output replaces only a regular file it may write: choose another path");
  struct stat link {};
  if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) return resolved_link(path);
  return path;
}

}  // namespace dist
