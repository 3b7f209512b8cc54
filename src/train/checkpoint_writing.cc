// Checkpoint::write (dist/train/checkpoint.h): the objects' state into one file, or, where a
// strategy keeps the parameters in shares, each worker's shares into its piece
// (checkpoint_pieces.h) and the rest into the file, which the chief writes once every piece is.
#include "dist/train/checkpoint.h"

#include <cstdio>
#include <functional>
#include <random>

#include <ATen/CPUGeneratorImpl.h>

#include "dist/core/error.h"
#include "dist/core/reduce_op.h"
#include "dist/core/timeline.h"
#include "dist/train/safetensors.h"
#include "distribute/step/optimizer_slots.h"
#include "train/checkpoint_checksums.h"
#include "train/checkpoint_format.h"
#include "train/checkpoint_object.h"
#include "train/checkpoint_pieces.h"
#include "train/hook_state.h"

namespace dist {
namespace {

std::string double_text(double v) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.17g", v);
  return text;
}

// `gathered`: every worker's state (taken: the next write needs a fresh gather), or empty.
void write_hook_state(const std::string& name, const CommunicationHook& hook, int workers,
                      std::vector<std::map<std::string, at::Tensor>>& gathered,
                      std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      std::map<std::string, std::string>& metadata) {
  std::vector<std::map<std::string, at::Tensor>> states;
  states.swap(gathered);
  if (states.empty() && workers == 1) states.push_back(hook.state());
  DIST_CHECK_ARG(static_cast<int>(states.size()) == workers, "Checkpoint: communication hook '",
                 name, "' runs on ", workers,
                 " workers: call gather_worker_states() on every worker before each write");
  const std::string entry = std::string(detail::kObjectPrefix) + name + "/";
  metadata[entry + "hook"] = hook.name();
  metadata[entry + "workers"] = std::to_string(workers);
  for (int w = 0; w < workers; ++w)
    for (const auto& [key, t] : states[static_cast<size_t>(w)])
      tensors.emplace_back(name + "/worker:" + std::to_string(w) + "/" + key, t);
}

at::Tensor random_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

}  // namespace

// Placed models' values (and slots) into their primary modules, where write() reads them.
void Checkpoint::prepare_to_read() const {
  for (const auto& object : objects_) {
    if (in_pieces(*object)) continue;  // each worker writes its own shares
    if (object->variables != nullptr) object->variables->prepare_to_read();
    if (object->kind == detail::kOptimizerKind)
      if (const auto& model = find(object->model)->variables)
        model->prepare_to_read_slots(*object->optimizer);
  }
}

namespace {

// A collective: every worker learns which failed (`failure`: this one's). Rethrows this
// worker's own failure, or throws a DataError naming another that failed at `what`.
void agree_on_failures(const DistributedVariables::ShareWorkers& job,
                       const std::exception_ptr& failure, const std::string& path,
                       const char* what) {
  std::vector<at::Tensor> failed{at::zeros({job.count}, at::kLong)};
  failed[0][job.index] = failure ? 1 : 0;
  job.all_reduce(failed, ReduceOp::kSum);
  if (failure) std::rethrow_exception(failure);
  for (int w = 0; w < job.count; ++w)
    if (failed[0][w].item<int64_t>() != 0)
      throw DataError(detail::concat("checkpoint '", path, "': worker ", w, " ", what,
                                     " (its own error says why), so the checkpoint is not "
                                     "complete"));
}

// The id of one save in pieces, the same on every worker: the largest of their random draws.
std::string draw_save_id(const DistributedVariables::ShareWorkers& job) {
  std::random_device device;
  const int64_t mine = static_cast<int64_t>((static_cast<uint64_t>(device()) << 31) ^ device());
  std::vector<at::Tensor> id{at::full({1}, mine, at::kLong)};
  job.all_reduce(id, ReduceOp::kMax);
  return std::to_string(id[0].item<int64_t>());
}

}  // namespace

void Checkpoint::write(const std::string& path, Env* env) const { write_then(path, env, {}); }

void Checkpoint::write_then(const std::string& path, Env* env,
                            const std::function<void()>& complete) const {
  const auto job = pieces_job();
  if (!job) {
    write_file(path, env, {});
    if (complete) complete();
    return;
  }
  const detail::PiecesOf of{job->count, state.step, draw_save_id(*job)};
  std::exception_ptr failure;
  try {
    detail::write_checkpoint_piece(path, of, job->index, piece_tensors(), env);
  } catch (...) {
    failure = std::current_exception();
  }
  // Every worker waits for every piece: the checkpoint's own file, which makes it whole, comes
  // only then; and every worker waits for the chief to have written it (and, through
  // `complete`, kept the directory), so no worker returns from a save that is not done.
  agree_on_failures(*job, failure, path, "could not write its piece");
  failure = nullptr;
  if (job->chief) {
    try {
      write_file(path, env, of);
      if (complete) complete();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree_on_failures(*job, failure, path, "could not complete the checkpoint's own file");
}

// This worker's shares of the parameters of every model in pieces and of its optimizers' slots.
std::vector<detail::PieceTensor> Checkpoint::piece_tensors() const {
  std::vector<detail::PieceTensor> tensors;
  for (const auto& object : objects_) {
    if (!in_pieces(*object)) continue;
    const Object& model = object->kind == detail::kModelKind ? *object : *find(object->model);
    const auto shares = model.variables->parameter_shares();
    const auto named = model.variables->primary()->named_parameters();
    if (object->kind == detail::kModelKind) {
      for (size_t i = 0; i < named.size(); ++i)
        tensors.push_back({object->name + "/" + named[i].key(), shares[i].begin,
                           model.variables->parameter_sizes(named[i].value()), shares[i].values});
      continue;
    }
    detail::check_optimizer_of(object->name, *object->optimizer, model.name,
                               detail::ParameterNames(*model.saved_module()));
    for (const auto& [i, slots] : model.variables->slot_shares(*object->optimizer)) {
      const auto sizes = model.variables->parameter_sizes(named[i].value());
      for (const auto& [slot, t] : slots) {
        // A slot of the parameter's shape is cut as the parameter is; a step counter is whole.
        const bool counter = slot == "step";
        tensors.push_back(
            {object->name + "/" + named[i].key() + "/" + slot, shares[i].begin, sizes, t, counter});
      }
    }
  }
  return tensors;
}

namespace {

// The metadata of a checkpoint file before its objects': the format, the training state and,
// when `of` has pieces, which save's pieces hold the rest.
std::map<std::string, std::string> state_metadata(const TrainingState& state,
                                                  const detail::PiecesOf& of) {
  std::map<std::string, std::string> metadata;
  metadata["format"] = detail::kCheckpointFormat;
  if (of.pieces > 0) {
    metadata[detail::kCheckpointPieces] = std::to_string(of.pieces);
    metadata[detail::kCheckpointSave] = of.save;
  }
  metadata["step"] = std::to_string(state.step);
  metadata["epoch"] = std::to_string(state.epoch);
  metadata["position.epoch"] = std::to_string(state.position.epoch);
  metadata["position.elements"] = std::to_string(state.position.elements);
  for (const auto& [key, value] : state.values) metadata[detail::kStateValuePrefix + key] = value;
  return metadata;
}

}  // namespace

void Checkpoint::write_file(const std::string& path, Env* env, const detail::PiecesOf& of) const {
  TimelineSpan span("checkpoint", "io");
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::map<std::string, std::string> metadata = state_metadata(state, of);
  prepare_to_read();
  for (const auto& object : objects_) {
    const std::string& name = object->name;
    const std::string prefix = name + "/";
    metadata[detail::kObjectPrefix + name] = object->kind;
    if (object->kind == detail::kModelKind) {
      const auto module = object->saved_module();
      for (const auto& p : module->named_parameters()) {
        if (in_pieces(*object)) break;  // in the pieces
        tensors.emplace_back(prefix + p.key(), p.value().detach());
      }
      for (const auto& b : module->named_buffers())
        tensors.emplace_back(prefix + b.key(), b.value().detach());
    } else if (object->kind == detail::kOptimizerKind) {
      const torch::optim::Optimizer& optimizer = *object->optimizer;
      const detail::ParameterNames names(*find(object->model)->saved_module());
      detail::check_optimizer_of(name, optimizer, object->model, names);
      const std::string kind = object->optimizer_kind->name;  // listed: checked when added
      const std::string entry = detail::kObjectPrefix + prefix;
      metadata[entry + "class"] = kind;
      metadata[entry + "model"] = object->model;
      const bool legacy = name == detail::kLegacyOptimizer && object->model == detail::kLegacyModel;
      if (legacy) metadata[detail::kLegacyOptimizer] = kind;
      const auto& groups = optimizer.param_groups();
      for (size_t g = 0; g < groups.size(); ++g) {
        const std::string lr = double_text(groups[g].options().get_lr());
        metadata[entry + "lr/" + std::to_string(g)] = lr;
        if (legacy) metadata[detail::kLegacyLearningRate + std::to_string(g)] = lr;
      }
      if (in_pieces(*object)) continue;  // its slots are in the pieces
      for (const auto& [impl, slots] : detail::export_slots(object->optimizer_with_kind())) {
        const std::string& parameter = *names.find(impl);  // checked above
        for (const auto& [slot, t] : slots)
          tensors.emplace_back(prefix + parameter + "/" + slot, t);
      }
    } else if (object->kind == detail::kHookKind) {
      write_hook_state(name, *object->hook, object->job->workers(), *object->gathered, tensors,
                       metadata);
    } else {
      tensors.emplace_back(name, object->value.detach());
    }
  }
  if (save_random_state) tensors.emplace_back(detail::kRandomStateTensor, random_state());
  detail::seal_checkpoint(tensors, metadata);
  save_safetensors(path, tensors, metadata, env);
}

}  // namespace dist
