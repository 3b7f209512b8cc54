// Crash-safe file replacement, shared by the safetensors writer, checkpoints and their pointer
// file: a crash at any moment leaves either the old file or the complete new one.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace dist::detail {

// Fills "<path>.tmp.<pid>" with `write(fd)` (false: failed, errno set), fsyncs it, renames it
// over `path` and fsyncs the directory. `what` names the kind of file in errors ("safetensors
// file"). On failure the temporary file is removed and Error names the path, the step and the
// system's reason. `at_stage`, when set, is called with "after_data" (written, not yet
// fsynced) and "before_rename": the seams the crash tests kill the process at.
void write_file_atomically(const std::string& path, const char* what,
                           const std::function<bool(int fd)>& write,
                           const std::function<void(const char* stage)>& at_stage = nullptr);

// write(2) until done; false on error (errno set).
bool write_all(int fd, const void* data, size_t size);

// The temporary name write_file_atomically uses for `path` in this process.
std::string temporary_path(const std::string& path);

}  // namespace dist::detail
