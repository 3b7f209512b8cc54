#include "core/atomic_file.h"

#include <unistd.h>

#include <filesystem>

#include "dist/core/error.h"
#include "dist/core/output_file.h"

namespace dist::detail {

bool exists_as_non_regular_file(const std::string& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  return !error && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status);
}

std::string temporary_path(const std::string& path) { return concat(path, ".tmp.", ::getpid()); }

void write_file_atomically(Env* env, const std::string& path, const char* what,
                           const std::function<void(WritableFile& file)>& write) {
  DIST_CHECK_ARG(env != nullptr, "cannot write ", what, " '", path, "': the Env is null");
  // A MemoryEnv's paths are not on the real file system, where they read as missing.
  const std::string target = output_file_target(path, concat("cannot write ", what));
  const std::string temp = temporary_path(target);
  bool renamed = false;
  try {
    std::unique_ptr<WritableFile> file = env->new_writable_file(temp);
    write(*file);
    file->sync();
    file->close();
    env->rename_file(temp, target);
    renamed = true;
    std::string dir = std::filesystem::path(target).parent_path().string();
    env->sync_dir(dir.empty() ? "." : dir);
  } catch (const std::exception& e) {
    if (!renamed && env->file_exists(temp)) {
      try {
        env->remove_file(temp);
      } catch (const DataError&) {  // the next CheckpointManager::save removes leftovers
      }
    }
    if (dynamic_cast<const DataError*>(&e) == nullptr) throw;
    throw DataError(concat("cannot write ", what, " '", path, "': ", e.what()));
  }
}

}  // namespace dist::detail
