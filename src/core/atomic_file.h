// Crash-safe file replacement, shared by every file the library writes whole (safetensors,
// checkpoints and their pointer file, TorchScript, images, the timeline): a crash at any moment
// leaves either the old file or the complete new one, and nothing but a regular file is ever
// replaced (dist/core/output_file.h).
#pragma once

#include <functional>
#include <string>

#include "dist/core/env.h"

namespace dist::detail {

// Through `env`: fills a temporary file beside the target with `write(file)`, syncs it, closes
// it, renames it over the target and syncs the directory. The target is `path`, or the file a
// symbolic link at `path` points at (output_file_target: anything but a writable regular file
// there is refused with InvalidArgument before anything is written). `what` names the kind of
// file in errors ("safetensors file"). On failure the temporary file is removed (if it can be)
// and DataError names `path` and carries the Env's message (the step, the file and the system's
// reason); exceptions `write` throws that are not DataError pass through unchanged, after the
// same cleanup.
void write_file_atomically(Env* env, const std::string& path, const char* what,
                           const std::function<void(WritableFile& file)>& write);

// True when `path` exists and is not a regular file (a directory, device node, FIFO or socket),
// following symbolic links. Asked of the real file system (Env has no notion of file kinds); a
// path not on it reads as missing.
bool exists_as_non_regular_file(const std::string& path);

// The temporary name write_file_atomically uses for `path` in this process.
std::string temporary_path(const std::string& path);

}  // namespace dist::detail
