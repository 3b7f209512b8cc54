// Checkpoint: everything needed to continue training exactly where it stopped: named objects
// (models, optimizers with their slots and learning rates, tensors, communication hooks' states)
// with the step, the epoch, the data iterator's position, the CPU random generator and the
// caller's values, in one safetensors file (or, where a strategy keeps the parameters in
// shares, one file and a piece per worker: written_in_pieces()). Written with any number of
// replicas or workers, read with any other or with no strategy; reading checks every checksum,
// name, shape and dtype before it changes anything. Optimizers: SGD, Adam, AdamW, RMSprop and
// Adagrad (LibTorch's); others are refused by name.
//
//   dist::Checkpoint ckpt(model, optimizer);  // the objects "model" and "optimizer"
//   dist::CheckpointManager manager("ckpts", 3);
//   if (auto path = manager.latest()) ckpt.read(*path);   // resume
//   ...  ckpt.state.step = step; ckpt.state.position = it.position(); manager.save(ckpt);
//   // or named objects, a model before its optimizer (tf.train.Checkpoint(generator_g=...)):
//   dist::Checkpoint gan;  gan.add("generator_g", g).add("generator_g_optimizer", g_opt);
//
// The file's names and metadata, and how older files are read: docs/design.md, "Checkpoints".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>

#include "dist/core/env.h"
#include "dist/data/dataset.h"
#include "dist/distribute/communication_hook.h"
#include "dist/distribute/distributed_variables.h"
#include "dist/distribute/mirrored.h"
#include "dist/distribute/mirrored_optimizer.h"

namespace dist {

class Strategy;
namespace detail {
struct PieceTensor;
struct PiecesOf;
}  // namespace detail

struct TrainingState {
  int64_t step = 0;   // global steps taken
  int64_t epoch = 0;  // the epoch the data position is in
  data::IteratorPosition position;
  std::map<std::string, std::string> values;  // the caller's own (metric sums, flags, ...)
};

// Copies share the objects (they are held, not copied); add() to a copy leaves the original
// as it was. Not thread-safe; write() and read() run in cross-replica code.
class Checkpoint {
 public:
  // No objects yet: add() them.
  Checkpoint() = default;
  // The objects "model" (if not null) and "optimizer" (if not null): a plain module and an
  // optimizer over its parameters. Without an optimizer, read() leaves the optimizer state of
  // a file unread (skip("optimizer")), as it always has.
  Checkpoint(std::shared_ptr<torch::nn::Module> model, torch::optim::Optimizer* optimizer);
  // A model placed by a strategy: saved once from its primary module; reading restores it
  // and lets the strategy bring every other place (replica copies) up to date.
  Checkpoint(std::shared_ptr<DistributedVariables> variables, torch::optim::Optimizer* optimizer);
  template <class M>
  Checkpoint(const Mirrored<M>& model, MirroredOptimizer* optimizer)
      : Checkpoint(model.shared_variables(),
                   optimizer != nullptr ? &optimizer->optimizer() : nullptr) {}

  // Adds the object `name`. A name is non-empty, holds no '/', does not start with "__", is
  // not "rng" (the random state's) and is not taken yet; InvalidArgument naming it otherwise.
  // Every object is held, not copied, and must outlive the checkpoint's use (a shared_ptr is
  // kept). Returns *this, to chain.
  //
  // A model: a plain module, or one placed by a strategy (saved from, and restored into, its
  // primary module, then synchronized to every other place).
  Checkpoint& add(const std::string& name, std::shared_ptr<torch::nn::Module> model);
  Checkpoint& add(const std::string& name, std::shared_ptr<DistributedVariables> variables);
  template <class M>
  Checkpoint& add(const std::string& name, const Mirrored<M>& model) {
    return add(name, model.shared_variables());
  }
  template <class M>
  Checkpoint& add(const std::string& name, const torch::nn::ModuleHolder<M>& model) {
    return add(name, std::static_pointer_cast<torch::nn::Module>(model.ptr()));
  }
  // An optimizer. Its slots are named by the parameter names of its model, which must have
  // been added before it (InvalidArgument naming the optimizer otherwise): for a
  // MirroredOptimizer the added model whose variables it updates; for a LibTorch optimizer
  // `model` if given, else the first added model that holds every parameter it updates.
  Checkpoint& add(const std::string& name, std::shared_ptr<MirroredOptimizer> optimizer);
  Checkpoint& add(const std::string& name, MirroredOptimizer* optimizer);
  Checkpoint& add(const std::string& name, torch::optim::Optimizer* optimizer,
                  const std::string& model = "");
  // A tensor (a loss weight, a counter): saved as it is, restored in place into the same
  // tensor, whose shape and dtype must match the file's.
  Checkpoint& add(const std::string& name, at::Tensor value);

  // A communication hook's state (communication_hook.h; PowerSGD's error feedback differs from
  // worker to worker): every worker's, as the tensors "<name>/worker:<w>/<state name>", with
  // the hook's name and the worker count in the metadata. Read back only into a hook of the
  // same name by a job of as many workers (DataError otherwise), each worker taking its own.
  // `strategy` must outlive the checkpoint's use. With several workers, call
  // gather_worker_states() on every worker before the chief writes.
  Checkpoint& add(const std::string& name, std::shared_ptr<CommunicationHook> hook,
                  const Strategy& strategy);
  // Collects the state of every hook added from every worker of its strategy, and the slots of
  // every optimizer whose strategy shards them (Sharding 'optimizer' and 'gradients'), for the
  // next write(): a collective (every worker calls it at the same point, as each would save). A
  // write() of a hook of several workers refuses a state not gathered since the last write, and
  // of sharded slots not gathered since the last step. At sharding 'parameters' nothing of the
  // model is gathered: the checkpoint is written in pieces (written_in_pieces()), and every
  // worker must also read() one (each keeps its own share of the values it reads).
  void gather_worker_states();

  // Whether write() writes this checkpoint in pieces: a model's strategy keeps its parameters
  // in shares (Sharding::kParameters). Every worker then calls write() (or
  // CheckpointManager::save()) at the same point, a collective: each writes its own shares of
  // the parameters and of their optimizer slots to "<path>.piece-<w>-of-<N>", and once every
  // piece is written the chief writes "<path>" with the rest, which completes it. No worker
  // holds the whole state. The pieces need a file system every worker and every later reader
  // sees (as TensorFlow's multi-worker checkpoints do). read() puts them together, with any
  // strategy and worker count; a worker that keeps shares reads only its own ranges, of pieces
  // or of a checkpoint written whole, so no worker holds the whole state then either.
  bool written_in_pieces() const;

  // Lets read() leave the object `name` of a file unread if it was not added (an added object
  // is always read): without it, an object in the file that was not added is a DataError, as
  // a misspelt name would otherwise lose its state. For reading part of a checkpoint, such as
  // one generator of a GAN for inference. A file need not hold a skipped object.
  Checkpoint& skip(const std::string& name);

  // The names of the objects added, in order.
  std::vector<std::string> names() const;

  TrainingState state;
  bool save_random_state = true;

  // Writes atomically through `env` (not owned): a temporary file, sync, rename, sync of the
  // directory. DataError names the file and the system's reason if the file system fails;
  // InvalidArgument names an optimizer that now updates a parameter its model lacks. In pieces
  // (written_in_pieces()): a collective of every worker; a worker whose piece failed throws its
  // own error, every other worker a DataError naming it, and "<path>" is not written.
  void write(const std::string& path, Env* env = Env::Default()) const;
  // Reads (through `env`) and checks the whole file (format, checksums, every object added is
  // in the file and every object in the file was added or skipped, every tensor's name, shape
  // and dtype) before changing anything; DataError names the file, the object and the tensor
  // otherwise. Then restores every object (and the random state if save_random_state). A
  // model whose strategy keeps its parameters in shares (Sharding::kParameters) takes this
  // worker's share of each value (no collective: every worker reads, and one that fails leaves
  // no other waiting).
  void read(const std::string& path, Env* env = Env::Default());

 private:
  struct Object;   // defined in train/checkpoint_object.h
  struct Reading;  // read()'s checks and the values it then applies (checkpoint_reading.cc)

  struct HookJob;                  // what a hook's object asks of its strategy (train/hook_state.h)
  friend class CheckpointManager;  // saves through write_then()

  const Object* find(const std::string& name) const;
  // The workers that write the pieces, or nothing (written whole).
  std::optional<DistributedVariables::ShareWorkers> pieces_job() const;
  bool in_pieces(const Object& object) const;
  std::vector<detail::PieceTensor> piece_tensors() const;
  // `of`: the save whose pieces hold the parameters and slots kept in shares (pieces 0: none).
  void write_file(const std::string& path, Env* env, const detail::PiecesOf& of) const;
  // write(), then `complete` on the writer of "<path>" once the checkpoint is whole; in pieces,
  // every worker returns only after that.
  void write_then(const std::string& path, Env* env, const std::function<void()>& complete) const;
  void prepare_to_read() const;
  Checkpoint& add_hook(const std::string& name, std::shared_ptr<CommunicationHook> hook,
                       std::shared_ptr<const HookJob> job);
  void check_new_name(const std::string& name) const;
  Checkpoint& append(std::shared_ptr<const Object> object);
  Checkpoint& add_optimizer(const std::string& name, torch::optim::Optimizer* optimizer,
                            std::string model, std::shared_ptr<MirroredOptimizer> owner);

  std::vector<std::shared_ptr<const Object>> objects_;  // in the order added (and written)
  std::set<std::string> skipped_;
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
  // (DataError naming the file), the pointer still names the previous latest checkpoint. A
  // checkpoint written in pieces is saved by every worker (each writes its piece), and the
  // chief's save then completes it and keeps the directory (the pointer, the oldest deleted
  // with their pieces).
  std::string save(const Checkpoint& checkpoint);
  // The latest complete checkpoint, if any; DataError if the pointer file is damaged.
  std::optional<std::string> latest() const;
  // The kept checkpoints, oldest first.
  std::vector<std::string> checkpoints() const;
  const std::string& directory() const { return directory_; }

 private:
  // Once the checkpoint `name` is whole: leftover temporary files go, the pointer names it, the
  // oldest beyond max_to_keep go with their pieces.
  void keep(const std::string& name);

  std::string directory_;
  int max_to_keep_;
  Env* env_;
};

}  // namespace dist
