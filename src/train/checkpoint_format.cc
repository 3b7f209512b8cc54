#include "train/checkpoint_format.h"

#include "dist/core/error.h"

namespace dist::detail {

void fail_reading(const std::string& path, const std::string& message) {
  throw DataError(concat("checkpoint '", path, "': ", message));
}

int64_t parse_metadata_int(const std::string& path,
                           const std::map<std::string, std::string>& metadata,
                           const std::string& key) {
  auto it = metadata.find(key);
  if (it == metadata.end()) fail_reading(path, "metadata '" + key + "' is missing");
  try {
    size_t used = 0;
    int64_t v = std::stoll(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  fail_reading(path, "metadata '" + key + "' is not an integer: '" + it->second + "'");
}

std::string tensor_owner(const std::string& tensor) { return tensor.substr(0, tensor.find('/')); }

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

namespace {

// A file written before named objects names none: its objects are "model" if it holds model
// tensors, "optimizer" if its metadata names an optimizer class.
std::map<std::string, FileObject> legacy_objects(const std::map<std::string, std::string>& meta,
                                                 const std::map<std::string, at::Tensor>& tensors) {
  std::map<std::string, FileObject> objects;
  for (const auto& [name, t] : tensors)
    if (tensor_owner(name) == kLegacyModel) objects[kLegacyModel] = {kModelKind, "", "", "", "", 0};
  if (auto it = meta.find(kLegacyOptimizer); it != meta.end())
    objects[kLegacyOptimizer] = {kOptimizerKind,      it->second, kLegacyModel,
                                 kLegacyLearningRate, "",         0};
  return objects;
}

}  // namespace

std::map<std::string, FileObject> objects_in_file(
    const std::string& path, const std::map<std::string, std::string>& meta,
    const std::map<std::string, at::Tensor>& tensors) {
  std::map<std::string, FileObject> objects;
  auto get = [&](const std::string& key) {
    auto it = meta.find(key);
    if (it == meta.end()) fail_reading(path, "metadata '" + key + "' is missing");
    return it->second;
  };
  for (auto it = meta.lower_bound(kObjectPrefix);
       it != meta.end() && starts_with(it->first, kObjectPrefix); ++it) {
    const std::string name = it->first.substr(sizeof(kObjectPrefix) - 1);
    if (name.find('/') != std::string::npos) continue;  // an optimizer's entries
    FileObject object{it->second, "", "", "", "", 0};
    if (object.kind == kOptimizerKind) {
      const std::string prefix = kObjectPrefix + name + "/";
      object.optimizer_class = get(prefix + "class");
      object.model = get(prefix + "model");
      object.learning_rate = prefix + "lr/";
    } else if (object.kind == kHookKind) {
      object.hook = get(kObjectPrefix + name + "/hook");
      object.workers = parse_metadata_int(path, meta, kObjectPrefix + name + "/workers");
    } else if (object.kind != kModelKind && object.kind != kTensorKind) {
      fail_reading(path, "object '" + name + "' is of an unknown kind '" + object.kind +
                             "' (expected model, optimizer, tensor or communication_hook)");
    }
    objects[name] = object;
  }
  if (!objects.empty()) return objects;
  return legacy_objects(meta, tensors);
}

}  // namespace dist::detail
