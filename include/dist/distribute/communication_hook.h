// CommunicationHook: how a mirrored strategy's gradient packs cross the worker processes,
// replaceable by the user (PyTorch DDP's register_comm_hook is the model). The strategy hands
// each pack, summed over the process's own replicas, to reduce() during backward (in pack
// order, from the thread that completed it); once the returned PendingWork is waited for, the
// buffer must hold the sum over every process, or the same bits of an approximation on every
// process. Every process must issue the same collectives in the same order. Taken by
// MirroredStrategy and MultiWorkerMirroredStrategy with overlap_with_backward (the default);
// refused under ParameterServerStrategy.
//
//   dist::MultiWorkerOptions options;
//   options.communication.communication_hook = dist::gradient_compression("powersgd:4");
//   dist::MultiWorkerMirroredStrategy strategy(options);
//
// Built-in hooks: gradient_compression.h; when each call runs and why: docs/design.md,
// "Gradient compression: communication hooks".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace dist {

// Work that may still be running. Copies share it.
class PendingWork {
 public:
  // Already done.
  PendingWork() = default;
  // Done once `finish` returned: wait() calls it once (later calls return at once) and
  // rethrows what it threw.
  explicit PendingWork(std::function<void()> finish);
  void wait();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// The collectives a hook may use between the worker processes: one member per process, CPU
// tensors, contiguous. Every call starts the collective; the tensors must stay alive and
// untouched until its work is waited for. Failures (a lost worker, a timeout) are CollectiveErrors
// from wait().
class ProcessCollectives {
 public:
  virtual ~ProcessCollectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sum over every process, in place.
  virtual PendingWork all_reduce_sum(at::Tensor& tensor) = 0;
  // Point to point; a send and its recv agree on tag, shape and dtype. Messages
  // between the same two processes with the same tag arrive in the order they were sent;
  // tags from 2^30 up are the library's.
  virtual PendingWork send(const at::Tensor& tensor, int to, int tag) = 0;
  virtual PendingWork recv(at::Tensor& tensor, int from, int tag) = 0;
};

// One pack of one step of one model.
struct GradientPack {
  int model = 0;      // which model of the strategy, in the order they were placed, from 0
  size_t index = 0;   // which pack of the model; 0 is the one backward produces first
  int64_t step = 0;   // steps of this model this process reduced before (since the strategy
                      // was made: a hook that must count across restarts keeps its own count
                      // in state())
  at::Tensor buffer;  // 1-D, float: the pack's gradients summed over this process's replicas
  std::vector<at::Tensor> gradients;  // views of `buffer` in the parameters' shapes
  std::vector<std::string> names;     // the parameters' names, as gradients
};

class CommunicationHook {
 public:
  virtual ~CommunicationHook() = default;
  // For logs: "bf16", "powersgd:4".
  virtual std::string name() const = 0;
  // Packs of fewer bytes gain nothing from this hook: the strategy sends them as one all-reduce
  // in float32 instead (unless its options set another threshold).
  virtual int64_t min_pack_bytes() const { return 0; }
  // Starts reducing `pack` (see above). `processes`, `pack` and its tensors live until the
  // work has been waited for; `processes` is the same object for every pack that crosses the
  // same processes (one hook may serve several strategies: key per-job state by it).
  virtual PendingWork reduce(ProcessCollectives& processes, GradientPack& pack) = 0;
  // This process's state kept across steps (PowerSGD's error feedback), by name, for
  // checkpoints; load_state gives back what state() returned in an earlier run with the same
  // model and worker count.
  virtual std::map<std::string, at::Tensor> state() const { return {}; }
  virtual void load_state(const std::map<std::string, at::Tensor>& /*state*/) {}
};

}  // namespace dist
