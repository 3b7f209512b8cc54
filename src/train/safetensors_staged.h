// save_safetensors with the crash-test seams of write_file_atomically (for checkpoints).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace dist::detail {

void save_safetensors_staged(const std::string& path,
                             const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                             const std::map<std::string, std::string>& metadata,
                             const std::function<void(const char* stage)>& at_stage);

}  // namespace dist::detail
