// Writing a trained TorchScript module back for Python (dist/models/torchscript_model.h).
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/atomic_file.h"
#include "dist/models/torchscript_model.h"
#include "dist/train/safetensors.h"

namespace dist::models {

void save_torchscript(const TorchScriptModuleImpl& model, const std::string& path, Env* env) {
  // The adapter's tensors are the scripted module's: it saves the trained values as they are.
  std::ostringstream bytes;
  model.script().save(bytes);
  const std::string data = std::move(bytes).str();
  detail::write_file_atomically(env, path, "TorchScript file",
                                [&](WritableFile& file) { file.append(data.data(), data.size()); });
}

void save_torchscript_weights(const TorchScriptModuleImpl& model, const std::string& path,
                              Env* env) {
  // state_dict's keys: every parameter, then every buffer (load_state_dict takes any order).
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& p : model.named_parameters()) tensors.emplace_back(p.key(), p.value().detach());
  for (const auto& b : model.named_buffers()) tensors.emplace_back(b.key(), b.value());
  save_safetensors(path, tensors, {{"format", "pt"}}, env);
}

}  // namespace dist::models
