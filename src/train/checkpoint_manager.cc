// CheckpointManager (dist/train/checkpoint.h): checkpoints named by step in one directory, the
// newest few kept, found again through a pointer file ("checkpoint", JSON: the latest and the
// kept names, oldest first) that is replaced atomically once a new checkpoint is complete.
#include "dist/train/checkpoint.h"

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "dist/core/error.h"
#include "train/checkpoint_pieces.h"

namespace dist {
namespace {

constexpr char kPointerFile[] = "checkpoint";

std::string checkpoint_name(int64_t step) {
  return "ckpt-" + std::to_string(step) + ".safetensors";
}

struct PointerFile {
  std::string latest;
  std::vector<std::string> kept;  // oldest first
};

std::optional<PointerFile> read_pointer(Env* env, const std::string& directory) {
  const std::string path = directory + "/" + kPointerFile;
  if (!env->file_exists(path)) return std::nullopt;
  auto file = env->new_random_access_file(path);
  std::string text(file->size(), '\0');
  file->read(0, text.size(), text.data());
  try {
    auto json = nlohmann::json::parse(text);
    PointerFile pointer{json.at("latest").get<std::string>(),
                        json.at("kept").get<std::vector<std::string>>()};
    for (const auto& name : pointer.kept)
      if (name.find('/') != std::string::npos) throw std::runtime_error("a name holds '/'");
    if (pointer.latest.find('/') != std::string::npos) throw std::runtime_error("a name holds '/'");
    return pointer;
  } catch (const std::exception& e) {
    throw DataError(detail::concat("checkpoint pointer file '", path, "' is damaged (", e.what(),
                                   "); delete it to start over, or "
                                   "point it at a checkpoint by hand"));
  }
}

// Removes a file that is no longer needed; a failure only leaves it behind, so it is ignored.
void remove_quietly(Env* env, const std::string& path) {
  try {
    env->remove_file(path);
  } catch (const DataError&) {
  }
}

}  // namespace

CheckpointManager::CheckpointManager(std::string directory, int max_to_keep, Env* env)
    : directory_(std::move(directory)), max_to_keep_(max_to_keep), env_(env) {
  DIST_CHECK_ARG(!directory_.empty(), "CheckpointManager: the directory is empty");
  DIST_CHECK_ARG(max_to_keep_ >= 1, "CheckpointManager: max_to_keep must be at least 1, got ",
                 max_to_keep_);
  DIST_CHECK_ARG(env_ != nullptr, "CheckpointManager: the Env is null");
  try {
    env_->create_dirs(directory_);
  } catch (const DataError& e) {
    throw DataError(detail::concat("cannot create checkpoint directory: ", e.what()));
  }
}

std::optional<std::string> CheckpointManager::latest() const {
  auto pointer = read_pointer(env_, directory_);
  if (!pointer) return std::nullopt;
  return directory_ + "/" + pointer->latest;
}

std::vector<std::string> CheckpointManager::checkpoints() const {
  std::vector<std::string> paths;
  if (auto pointer = read_pointer(env_, directory_))
    for (const auto& name : pointer->kept) paths.push_back(directory_ + "/" + name);
  return paths;
}

std::string CheckpointManager::save(const Checkpoint& checkpoint) {
  const std::string name = checkpoint_name(checkpoint.state.step);
  // In pieces, every worker writes its own and the chief runs keep() once all are written.
  checkpoint.write_then(directory_ + "/" + name, env_, [&] { keep(name); });
  return directory_ + "/" + name;
}

void CheckpointManager::keep(const std::string& name) {
  PointerFile pointer = read_pointer(env_, directory_).value_or(PointerFile{});
  // Leftovers of an interrupted save (any process): temporary files never renamed. After the
  // write, which waited for every worker's piece, so none is still being written.
  const std::vector<std::string> children = env_->get_children(directory_);
  for (const std::string& child : children) {
    if (child.find(".tmp.") != std::string::npos &&
        (child.rfind("ckpt-", 0) == 0 || child.rfind(kPointerFile, 0) == 0))
      remove_quietly(env_, directory_ + "/" + child);
  }

  std::vector<std::string> kept;
  for (const auto& old : pointer.kept)
    if (old != name) kept.push_back(old);
  kept.push_back(name);
  std::vector<std::string> dropped;
  while (static_cast<int>(kept.size()) > max_to_keep_) {
    dropped.push_back(kept.front());
    kept.erase(kept.begin());
  }
  const std::string text = nlohmann::json{{"latest", name}, {"kept", kept}}.dump() + "\n";
  detail::write_file_atomically(env_, directory_ + "/" + kPointerFile, "checkpoint pointer file",
                                [&](WritableFile& file) { file.append(text.data(), text.size()); });
  // Only now, with the new checkpoint complete and pointed to, delete the oldest.
  for (const auto& old : dropped) {
    remove_quietly(env_, directory_ + "/" + old);
    for (const auto& child : children)
      if (detail::is_checkpoint_piece(child, old)) remove_quietly(env_, directory_ + "/" + child);
  }
}

}  // namespace dist
