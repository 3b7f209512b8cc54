// Crash-safe file replacement, shared by the safetensors writer, checkpoints and their pointer
// file: a crash at any moment leaves either the old file or the complete new one.
#pragma once

#include <functional>
#include <string>

#include "dist/core/env.h"

namespace dist::detail {

// Through `env`: fills "<path>.tmp.<pid>" with `write(file)`, syncs it, closes it, renames it
// over `path` and syncs the directory. `what` names the kind of file in errors ("safetensors
// file"). On failure the temporary file is removed (if it can be) and DataError names `path`
// and carries the Env's message (the step, the file and the system's reason); exceptions
// `write` throws that are not DataError pass through unchanged, after the same cleanup.
void write_file_atomically(Env* env, const std::string& path, const char* what,
                           const std::function<void(WritableFile& file)>& write);

// True when `path` exists and is not a regular file (a directory, device node, FIFO or socket):
// a rename would replace it, and appending to a FIFO would block. Asked of the real file system
// (Env has no notion of file kinds); a path not on it reads as missing.
bool exists_as_non_regular_file(const std::string& path);

// The temporary name write_file_atomically uses for `path` in this process.
std::string temporary_path(const std::string& path);

}  // namespace dist::detail
