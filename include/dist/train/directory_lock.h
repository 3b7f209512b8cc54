// DirectoryLock: one job at a time in a directory of outputs (checkpoints, logs).
//
//   dist::DirectoryLock lock("ckpts", "checkpoints");  // throws if another process holds it
//
// Two jobs that write checkpoints into one directory overwrite each other's files, and a resume
// may continue from the other job's weights. The lock is an flock(2) on DIR/.dist-lock, which the
// kernel releases when the holder exits in any way (a crashed or killed job leaves nothing
// stuck); the file names the holder (host and pid), so the refusal can say who has it. Held for
// the object's life; movable, not copyable. flock is per open file, so two locks of one
// directory in one process also exclude each other.
#pragma once

#include <string>

namespace dist {

class DirectoryLock {
 public:
  // Creates `dir` if needed and locks it; `purpose` names the outputs in the error message.
  // Throws InvalidArgument naming the holder if another lock holds the directory, and
  // DataError if the lock file cannot be made.
  DirectoryLock(const std::string& dir, const std::string& purpose);
  ~DirectoryLock();
  DirectoryLock(DirectoryLock&& other) noexcept;
  DirectoryLock& operator=(DirectoryLock&& other) noexcept;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  const std::string& path() const { return path_; }  // DIR/.dist-lock

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace dist
