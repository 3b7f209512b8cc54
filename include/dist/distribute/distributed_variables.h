// DistributedVariables: a model's variables as a strategy placed them.
//
// Where variables live is the strategy's choice: MirroredStrategy keeps a copy per replica
// (sharing storage on CPU), OneDeviceStrategy one copy, a parameter-server strategy keeps them
// on other processes. Code that works with any strategy (checkpoints, the Keras Model, the
// optimizer wrapper) goes through this interface and never assumes copies.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "dist/core/reduce_op.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace dist {

class StrategyExtended;

class DistributedVariables {
 public:
  virtual ~DistributedVariables() = default;

  // The module cross-replica code reads and writes: after every step it holds the current
  // values (checkpoints save it, save_weights writes it).
  virtual std::shared_ptr<torch::nn::Module> primary() const = 0;
  // The module local replica `local_replica` computes with.
  virtual std::shared_ptr<torch::nn::Module> replica(int local_replica) const = 0;
  virtual int num_replicas() const = 0;
  // The module of the calling thread: its replica's inside run(), primary() outside.
  std::shared_ptr<torch::nn::Module> current() const;
  // Its local replica index, or -1 for primary(). InvalidArgument inside run() of a strategy
  // other than strategy().
  int current_index() const;

  // The tensors an optimizer updates (its parameter list).
  virtual std::vector<at::Tensor> trainable_variables() const = 0;

  // Call before reading primary()'s values outside a step (writing a checkpoint): a strategy
  // that holds the current values elsewhere (on parameter servers) fetches them into primary().
  virtual void prepare_to_read() {}
  // A collective of every worker: values the workers keep in shares (Sharding::kParameters
  // keeps 1/N of each parameter) become whole in primary() until the next step's forward.
  // Call it on every worker before one of them reads primary() outside a step (save_weights),
  // and before the strategy goes: the module keeps what it holds then. Clone what you read: the
  // next forward releases the values again. (A checkpoint needs none: it is written in pieces.)
  virtual void gather_values() {}
  // Call before changing primary()'s values in place outside a step (restoring a checkpoint,
  // set_weights): values this process shares with others (the workers of one host share one
  // copy) become its own first, so the change cannot reach, or tear, another process's. Values
  // kept in shares are gathered whole first (gather_values): then it is a collective.
  virtual void prepare_to_write() {}
  // Call after changing primary()'s values outside a step (restoring a checkpoint): every
  // other place that holds them gets the new values.
  virtual void sync_from_primary() = 0;

  // The shape of `parameter`, one of primary()'s parameters, whether or not its values are
  // whole here now (between steps Sharding::kParameters keeps each worker's share only).
  virtual std::vector<int64_t> parameter_sizes(const at::Tensor& parameter) const {
    return parameter.sizes().vec();
  }
  // Restores primary()'s parameters and buffers outside a step (a checkpoint read): the values
  // whole, in parameters() and buffers() order, their shapes those of parameter_sizes() and of
  // the buffers. By default prepare_to_write(), copies into primary(), sync_from_primary().
  // When the strategy keeps shares (keeps_shares()), each of `parameters` may also be this
  // worker's share of the value (parameter_shares()'s range, 1-D: what a checkpoint reads), and
  // the worker takes its share as its own: no collective, so a worker that cannot read its
  // checkpoint leaves no other waiting. Values gathered whole (gather_values) are released
  // then: gather again before reading them outside a step. (Inline, as every virtual
  // here: the class has no key function, so code that uses it, such as the fuzz targets'
  // checkpoint reader, needs none of the strategies.)
  virtual void restore(const std::vector<at::Tensor>& parameters,
                       const std::vector<at::Tensor>& buffers) {
    restore_in_primary(parameters, buffers);
  }

  // The same two for the state ("slots") of `optimizer`, an optimizer over these variables,
  // which a strategy may also keep elsewhere (beside each variable on its parameter server):
  // before a checkpoint writes the state, it is fetched into `optimizer`; after a checkpoint
  // restored it into `optimizer`, it goes back where the strategy keeps it.
  virtual void prepare_to_read_slots(torch::optim::Optimizer& optimizer) {}
  virtual void sync_slots_from(torch::optim::Optimizer& optimizer) {}
  // A collective of every worker, before a checkpoint is written (Checkpoint::
  // gather_worker_states): slots the workers keep in shares (Sharding) are gathered whole into
  // `optimizer`, where prepare_to_read_slots then finds them. Sharding::kParameters refuses it
  // between a restore and the first step (the slots wait in shares for the step).
  virtual void gather_slots(torch::optim::Optimizer& optimizer) {}

  // What a worker keeps of a value when a strategy keeps the values in shares
  // (Sharding::kParameters keeps 1/N of each parameter, and of its optimizer slots, on each of
  // N workers): the range of the flat elements that starts at `begin`, and its values (1-D;
  // empty where this worker keeps none of it).
  struct Share {
    int64_t begin = 0;
    at::Tensor values;
  };
  // Whether each worker keeps only its share of the parameters: a checkpoint is then written in
  // pieces, every worker its own (Checkpoint::write), so that no worker holds the whole state.
  virtual bool keeps_shares() const { return false; }
  // This worker's share of each of primary()'s parameters (parameters() order), with their
  // current values, or nothing when every worker keeps them whole.
  virtual std::vector<Share> parameter_shares() const { return {}; }
  // The same ranges of `optimizer`'s slots, for each parameter (by index in parameters()) that
  // has state: slot name -> its range's values (1-D), except the step counter "step", whole.
  virtual std::map<size_t, std::map<std::string, at::Tensor>> slot_shares(
      torch::optim::Optimizer& optimizer) {
    return {};
  }

  // Restores `optimizer`'s slots from this worker's shares of them (a checkpoint read, when
  // keeps_shares()): `shares` as slot_shares() returns them; a parameter without an entry has
  // no state. The optimizer itself is left without state: the strategy keeps it.
  virtual void restore_slot_shares(
      torch::optim::Optimizer& optimizer,
      const std::map<size_t, std::map<std::string, at::Tensor>>& shares) {}

  // The workers among which each keeps its share (keeps_shares()): this one's index, how many,
  // whether this one is the chief, and an in-place all-reduce over them (a collective). A
  // checkpoint in pieces needs nothing else of the strategy.
  struct ShareWorkers {
    int index = 0;
    int count = 1;
    bool chief = true;
    std::function<void(std::vector<at::Tensor>&, ReduceOp)> all_reduce;
  };
  virtual ShareWorkers share_workers() const { return {}; }

  // The strategy that placed them (it applies their gradients).
  virtual StrategyExtended& strategy() const = 0;

 protected:
  // restore()'s default: prepare_to_write(), the values into primary(), sync_from_primary().
  void restore_in_primary(const std::vector<at::Tensor>& parameters,
                          const std::vector<at::Tensor>& buffers);
};

}  // namespace dist
