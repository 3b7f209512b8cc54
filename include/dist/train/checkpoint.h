// Checkpoint: everything needed to continue training exactly where it stopped, in one file.
//
//   dist::Checkpoint ckpt(model, optimizer);          // a Mirrored model or a plain module
//   dist::CheckpointManager manager("ckpts", 3);
//   if (auto path = manager.latest()) ckpt.read(*path);   // resume
//   ...  ckpt.state.step = step; ckpt.state.position = it.position(); manager.save(ckpt);
//
// A checkpoint holds the model's parameters and buffers (a Mirrored model's once: the copies
// are identical), the optimizer's slots and learning rates, the step, the epoch, the data
// iterator's position, the CPU random generator and the caller's own values. It is written
// with any number of replicas or workers and read with any other, or with no strategy.
//
// The file is safetensors (see safetensors.h), so other tools read the weights ("model/<name>");
// the optimizer's slots are "optimizer/<parameter>/<slot>", the random state "rng/cpu". The
// "__metadata__" holds format "dist.checkpoint/1", the state, and CRC-32C checksums: one per
// tensor ("crc32c/<tensor>") and "header_crc32c" over every other header entry, so a flipped
// bit anywhere is reported, naming the file and the tensor, before anything is changed.
//
// Optimizers: SGD, Adam, AdamW, RMSprop and Adagrad (LibTorch's); others are refused by name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "dist/core/env.h"
#include "dist/data/dataset.h"
#include "dist/distribute/distributed_variables.h"
#include "dist/distribute/mirrored.h"
#include "dist/distribute/mirrored_optimizer.h"

namespace dist {

struct TrainingState {
  int64_t step = 0;   // global steps taken
  int64_t epoch = 0;  // the epoch the data position is in
  data::IteratorPosition position;
  std::map<std::string, std::string> values;  // the caller's own (metric sums, flags, ...)
};

class Checkpoint {
 public:
  // A plain module (or none) and an optional optimizer over its parameters.
  Checkpoint(std::shared_ptr<torch::nn::Module> model, torch::optim::Optimizer* optimizer);
  // A model placed by a strategy: saved once from its primary module; reading restores it
  // and lets the strategy bring every other place (replica copies) up to date.
  Checkpoint(std::shared_ptr<DistributedVariables> variables, torch::optim::Optimizer* optimizer);
  template <class M>
  Checkpoint(const Mirrored<M>& model, MirroredOptimizer* optimizer)
      : Checkpoint(model.shared_variables(),
                   optimizer != nullptr ? &optimizer->optimizer() : nullptr) {}

  TrainingState state;
  bool save_random_state = true;

  // Writes atomically through `env` (not owned): a temporary file, sync, rename, sync of the
  // directory. DataError names the file and the system's reason if the file system fails.
  void write(const std::string& path, Env* env = Env::Default()) const;
  // Reads (through `env`) and checks the whole file (format, checksums, every tensor's name,
  // shape and dtype against the model and optimizer) before changing anything; DataError names
  // the file and the tensor otherwise.
  void read(const std::string& path, Env* env = Env::Default());

 private:
  std::shared_ptr<torch::nn::Module> model_;         // what is saved and restored
  std::shared_ptr<DistributedVariables> variables_;  // told after a restore, if any
  torch::optim::Optimizer* optimizer_;
};

// A directory of checkpoints "ckpt-<step>.safetensors" and a pointer file "checkpoint" naming
// the latest and the kept ones (replaced atomically after the new checkpoint is complete).
// The oldest beyond max_to_keep are deleted only after that; leftover temporary files of an
// interrupted save are removed at the next save. All file access goes through `env` (not
// owned; it must outlive the manager). Not thread-safe.
class CheckpointManager {
 public:
  // Creates `directory` if needed (DataError naming it if that fails).
  explicit CheckpointManager(std::string directory, int max_to_keep = 5, Env* env = Env::Default());

  // Writes `checkpoint` as ckpt-<state.step> and returns its path. If the file system fails
  // (DataError naming the file), the pointer still names the previous latest checkpoint.
  std::string save(const Checkpoint& checkpoint);
  // The latest complete checkpoint, if any; DataError if the pointer file is damaged.
  std::optional<std::string> latest() const;
  // The kept checkpoints, oldest first.
  std::vector<std::string> checkpoints() const;
  const std::string& directory() const { return directory_; }

 private:
  std::string directory_;
  int max_to_keep_;
  Env* env_;
};

}  // namespace dist
