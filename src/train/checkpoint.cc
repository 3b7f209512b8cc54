#include "dist/train/checkpoint.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <nlohmann/json.hpp>

#include "core/crc32c.h"
#include "dist/core/error.h"
#include "dist/train/safetensors.h"
#include "train/atomic_file.h"
#include "train/optimizer_slots.h"

namespace dist {
namespace {

constexpr char kFormat[] = "dist.checkpoint/1";
constexpr char kModel[] = "model/";
constexpr char kOptimizer[] = "optimizer/";
constexpr char kRandom[] = "rng/cpu";
constexpr char kChecksumPrefix[] = "crc32c/";
constexpr char kHeaderChecksum[] = "header_crc32c";
constexpr char kValuePrefix[] = "value/";

std::string hex(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", value);
  return text;
}

uint32_t tensor_checksum(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return crc32c(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
}

// Over every header entry but the header checksum itself: names, dtypes, shapes (the offsets
// follow from them, the reader checks the tiling) and the metadata, in a fixed order.
uint32_t header_checksum(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::ostringstream text;
  for (const auto& [name, t] : tensors)
    text << name << '\0' << t.scalar_type() << t.sizes() << '\0';
  for (const auto& [key, value] : metadata)
    if (key != kHeaderChecksum) text << key << '\0' << value << '\0';
  const std::string bytes = text.str();
  return crc32c(bytes.data(), bytes.size());
}

std::string double_text(double v) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.17g", v);
  return text;
}

[[noreturn]] void fail(const std::string& path, const std::string& message) {
  throw DataError(detail::concat("checkpoint '", path, "': ", message));
}

int64_t parse_int(const std::string& path, const std::map<std::string, std::string>& metadata,
                  const std::string& key) {
  auto it = metadata.find(key);
  if (it == metadata.end()) fail(path, "metadata '" + key + "' is missing");
  try {
    size_t used = 0;
    int64_t v = std::stoll(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  fail(path, "metadata '" + key + "' is not an integer: '" + it->second + "'");
}

// Names of the saved copy's parameters by TensorImpl, to name optimizer slots.
class ParameterNames {
 public:
  explicit ParameterNames(const torch::nn::Module& module) {
    for (const auto& p : module.named_parameters())
      names_[p.value().unsafeGetTensorImpl()] = p.key();
  }
  const std::string& of(const void* impl) const {
    auto it = names_.find(impl);
    DIST_CHECK_ARG(it != names_.end(),
                   "Checkpoint: the optimizer holds a parameter that is not in the model");
    return it->second;
  }

 private:
  std::map<const void*, std::string> names_;
};

}  // namespace

Checkpoint::Checkpoint(std::shared_ptr<torch::nn::Module> model, torch::optim::Optimizer* optimizer)
    : model_(std::move(model)), optimizer_(optimizer) {}

Checkpoint::Checkpoint(std::shared_ptr<DistributedVariables> variables,
                       torch::optim::Optimizer* optimizer)
    : model_(variables ? variables->primary() : nullptr),
      variables_(std::move(variables)),
      optimizer_(optimizer) {}

void Checkpoint::write(const std::string& path, Env* env) const {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::map<std::string, std::string> metadata;
  metadata["format"] = kFormat;
  metadata["step"] = std::to_string(state.step);
  metadata["epoch"] = std::to_string(state.epoch);
  metadata["position.epoch"] = std::to_string(state.position.epoch);
  metadata["position.elements"] = std::to_string(state.position.elements);
  for (const auto& [key, value] : state.values) metadata[kValuePrefix + key] = value;

  if (model_ != nullptr) {
    for (const auto& p : model_->named_parameters())
      tensors.emplace_back(kModel + p.key(), p.value().detach());
    for (const auto& b : model_->named_buffers())
      tensors.emplace_back(kModel + b.key(), b.value().detach());
  }
  if (optimizer_ != nullptr) {
    DIST_CHECK_ARG(model_ != nullptr,
                   "Checkpoint: an optimizer needs its model, to name its slots");
    const ParameterNames names(*model_);
    metadata["optimizer"] = detail::optimizer_kind(*optimizer_);
    const auto& groups = optimizer_->param_groups();
    for (size_t g = 0; g < groups.size(); ++g)
      metadata["optimizer.lr/" + std::to_string(g)] = double_text(groups[g].options().get_lr());
    for (const auto& [impl, slots] : detail::export_slots(*optimizer_)) {
      for (const auto& [slot, t] : slots)
        tensors.emplace_back(kOptimizer + names.of(impl) + "/" + slot, t);
    }
  }
  if (save_random_state) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    tensors.emplace_back(kRandom, generator.get_state());
  }

  for (const auto& [name, t] : tensors) metadata[kChecksumPrefix + name] = hex(tensor_checksum(t));
  metadata[kHeaderChecksum] = hex(header_checksum(tensors, metadata));
  save_safetensors(path, tensors, metadata, env);
}

void Checkpoint::read(const std::string& path, Env* env) {
  SafetensorsFile file = load_safetensors(path, env);  // layout checked before any allocation
  const auto& meta = file.metadata;
  auto format = meta.find("format");
  if (format == meta.end() || format->second != kFormat)
    fail(path, detail::concat("not a checkpoint of this library (metadata format is '",
                              format == meta.end() ? "missing" : format->second, "', expected '",
                              kFormat, "')"));
  auto header_crc = meta.find(kHeaderChecksum);
  if (header_crc == meta.end()) fail(path, "the header checksum is missing");
  if (header_crc->second != hex(header_checksum(file.tensors, meta)))
    fail(path, "the header checksum does not match: the header is damaged");
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, t] : file.tensors) {
    auto crc = meta.find(kChecksumPrefix + name);
    if (crc == meta.end()) fail(path, "tensor '" + name + "' has no checksum");
    if (crc->second != hex(tensor_checksum(t)))
      fail(path,
           "tensor '" + name + "': its data does not match its checksum: the file is damaged");
    tensors[name] = t;
  }

  // Check everything against the model and optimizer before changing anything.
  auto take = [&](const std::string& name, const at::Tensor& like) {
    auto it = tensors.find(name);
    if (it == tensors.end())
      fail(path, "tensor '" + name + "' is missing; was it written for a different model?");
    if (it->second.sizes() != like.sizes() || it->second.scalar_type() != like.scalar_type())
      fail(path, detail::concat("tensor '", name, "' is ", it->second.sizes(), " ",
                                it->second.scalar_type(), " but the model has ", like.sizes(), " ",
                                like.scalar_type()));
    at::Tensor t = it->second;
    tensors.erase(it);
    return t;
  };
  std::vector<std::pair<at::Tensor, at::Tensor>> params;  // (destination, value)
  std::vector<at::Tensor> buffers;  // in named_buffers() order; each copy has its own
  if (model_ != nullptr) {
    for (const auto& p : model_->named_parameters())
      params.emplace_back(p.value(), take(kModel + p.key(), p.value()));
    for (const auto& b : model_->named_buffers())
      buffers.push_back(take(kModel + b.key(), b.value()));
  }
  std::vector<std::pair<const void*, std::map<std::string, at::Tensor>>> slots;
  std::vector<double> learning_rates;
  if (optimizer_ != nullptr) {
    const std::string kind = detail::optimizer_kind(*optimizer_);
    auto saved_kind = meta.find("optimizer");
    if (saved_kind == meta.end() || saved_kind->second != kind)
      fail(path, detail::concat("it holds ",
                                saved_kind == meta.end() ? "no optimizer state"
                                                         : saved_kind->second + " state",
                                " but the optimizer is ", kind));
    const ParameterNames names(*model_);
    for (const auto& group : optimizer_->param_groups()) {
      for (const auto& p : group.params()) {
        const std::string prefix = kOptimizer + names.of(p.unsafeGetTensorImpl()) + "/";
        std::map<std::string, at::Tensor> mine;
        for (auto it = tensors.lower_bound(prefix);
             it != tensors.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
          mine[it->first.substr(prefix.size())] = it->second;
          it = tensors.erase(it);
        }
        slots.emplace_back(p.unsafeGetTensorImpl(), std::move(mine));
      }
    }
    for (size_t g = 0; g < optimizer_->param_groups().size(); ++g) {
      auto lr = meta.find("optimizer.lr/" + std::to_string(g));
      if (lr == meta.end())
        fail(path, "the learning rate of parameter group " + std::to_string(g) + " is missing");
      char* end = nullptr;
      const double value = std::strtod(lr->second.c_str(), &end);
      if (lr->second.empty() || *end != '\0' || !std::isfinite(value) || value < 0)
        fail(path, "the learning rate of parameter group " + std::to_string(g) +
                       " is not a non-negative number: '" + lr->second + "'");
      learning_rates.push_back(value);
    }
    detail::check_slots(
        *optimizer_, slots, [&](const void* impl) { return names.of(impl); },
        [&](const std::string& message) { fail(path, message); });
  }
  at::Tensor random;
  if (auto it = tensors.find(kRandom); it != tensors.end()) {
    random = it->second;
    tensors.erase(it);
    // LibTorch checks a generator state (size, dtype, mt19937 invariants) only while setting
    // it, with c10::Error: try it on a scratch generator, before anything has changed.
    try {
      at::make_generator<at::CPUGeneratorImpl>().set_state(random);
    } catch (const c10::Error& e) {
      fail(path, detail::concat("tensor '", kRandom, "' is not a CPU random generator state (",
                                e.what_without_backtrace(), ")"));
    }
  }
  for (const auto& [name, t] : tensors)
    if (name.rfind(kModel, 0) == 0)
      fail(path,
           "tensor '" + name + "' is not in the model; was it written for a different model?");

  TrainingState restored;
  restored.step = parse_int(path, meta, "step");
  restored.epoch = parse_int(path, meta, "epoch");
  restored.position.epoch = parse_int(path, meta, "position.epoch");
  restored.position.elements = parse_int(path, meta, "position.elements");
  for (const auto& [key, value] : meta)
    if (key.rfind(kValuePrefix, 0) == 0)
      restored.values[key.substr(sizeof(kValuePrefix) - 1)] = value;

  // Apply to the primary module, then let the strategy's placement follow.
  torch::NoGradGuard no_grad;
  if (variables_ != nullptr) variables_->prepare_to_write();
  for (auto& [dst, value] : params) dst.copy_(value);
  if (model_ != nullptr) {
    auto destinations = model_->buffers();
    for (size_t b = 0; b < buffers.size(); ++b) destinations[b].copy_(buffers[b]);
  }
  if (variables_ != nullptr) variables_->sync_from_primary();
  if (optimizer_ != nullptr) {
    detail::import_slots(*optimizer_, slots);
    for (size_t g = 0; g < learning_rates.size(); ++g)
      optimizer_->param_groups()[g].options().set_lr(learning_rates[g]);
  }
  if (random.defined() && save_random_state) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(random);
  }
  state = std::move(restored);
}

// ---- CheckpointManager --------------------------------------------------------------------

namespace {

constexpr char kPointer[] = "checkpoint";

std::string checkpoint_name(int64_t step) {
  return "ckpt-" + std::to_string(step) + ".safetensors";
}

struct Pointer {
  std::string latest;
  std::vector<std::string> kept;  // oldest first
};

std::optional<Pointer> read_pointer(Env* env, const std::string& directory) {
  const std::string path = directory + "/" + kPointer;
  if (!env->file_exists(path)) return std::nullopt;
  auto file = env->new_random_access_file(path);
  std::string text(file->size(), '\0');
  file->read(0, text.size(), text.data());
  try {
    auto json = nlohmann::json::parse(text);
    Pointer pointer{json.at("latest").get<std::string>(),
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
  // Leftovers of an interrupted save (any process): temporary files never renamed.
  for (const std::string& name : env_->get_children(directory_)) {
    if (name.find(".tmp.") != std::string::npos &&
        (name.rfind("ckpt-", 0) == 0 || name.rfind(kPointer, 0) == 0))
      remove_quietly(env_, directory_ + "/" + name);
  }
  Pointer pointer = read_pointer(env_, directory_).value_or(Pointer{});
  const std::string name = checkpoint_name(checkpoint.state.step);
  checkpoint.write(directory_ + "/" + name, env_);

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
  detail::write_file_atomically(env_, directory_ + "/" + kPointer, "checkpoint pointer file",
                                [&](WritableFile& file) { file.append(text.data(), text.size()); });
  // Only now, with the new checkpoint complete and pointed to, delete the oldest.
  for (const auto& old : dropped) remove_quietly(env_, directory_ + "/" + old);
  return directory_ + "/" + name;
}

}  // namespace dist
