// HostSharedVariables: the variables and optimizer slots of the worker processes of one host,
// kept as one copy in shared memory, so the workers split each optimizer step between them as
// the replicas of one process do (OptimizerShards over workers x replicas shares).
//
// Why: a worker process that keeps its own copy must run the whole optimizer step on it. On the
// 784-4096-4096-10 MLP (20M parameters) two workers each ran Adam over all 20M elements, and
// Adam's memory traffic (parameters, gradients and two slots read, three written) is a third
// of a forward and backward pass; both copies also compete for the one memory bus. With one
// copy per host each worker updates its share of the elements in place and every worker reads
// the result: no copy to send back, no second optimizer.
//
// Protocol (the host-split OptimizerStepPlan, one thread per worker process, all workers at once):
// when the step can be split, the workers check that everything lives in the current shared
// copy (a restored checkpoint gives the slots new storage, for example) and, if not, share()
// moves it into a new one; then each steps its share, and a barrier makes every share visible
// before anyone reads the variables again. When the step cannot be split, unshare() gives every
// worker its own copy back, and each steps it whole, as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

namespace dist {
namespace collective {
class Communicator;
}

class HostSharedVariables {
 public:
  // One value and the tensors that hold it: a parameter with its replica copies (which share
  // its storage), or one optimizer slot. Contiguous CPU tensors.
  using Holders = std::vector<at::Tensor>;

  // Whether every value's holders live at that value's place in the current shared copy.
  bool holds(const std::vector<Holders>& values) const;
  // A collective of one thread per worker process, every worker with the same values (shapes,
  // dtypes and contents): moves them into a new shared copy holding worker 0's contents. False,
  // with nothing moved, when the workers cannot share memory (on every worker alike).
  bool share(const std::vector<Holders>& values, collective::Communicator& workers);
  // Every value in the shared copy gets storage of its own again (its holders still share it).
  void unshare(const std::vector<Holders>& values);
  bool active() const { return region_ != nullptr; }

  // The workers' steps write the shared copy; anything else that writes it in place writes it
  // once per worker (a hand-made weight decay in code every worker runs, say). In-place writes
  // bump a tensor's version counter: remember the parameters' versions after a step, and ask
  // before the next whether anything else wrote them.
  void remember_versions(const std::vector<Holders>& parameters);
  bool written_outside_steps(const std::vector<Holders>& parameters) const;

 private:
  bool in_region(const at::Tensor& t) const;

  std::shared_ptr<void> region_;  // the mapping; each tensor viewing it holds it too
  size_t bytes_ = 0;
  std::vector<const void*> places_;  // where each value of the last share() lives
  std::vector<int64_t> versions_;    // of each parameter holder after the last shared step
};

}  // namespace dist
