// ZeRO stage 3 (Sharding::kParameters): every worker keeps chunk w of each parameter; a layer's
// whole parameters exist only while it computes.
//
// The units are the model's layers, in the order they compute (layer_gathering.h: the children
// of a torch::nn::Sequential, or the layers of a dist::LayeredModule such as keras::Functional).
// A parameter is released by emptying its storage in place (FSDP frees storage the same way)
// and making the variable an empty tensor (set_data): the same variable, with the same gradient
// accumulator and the same version, over the same storage once gathered again, so what the
// autograd graph saved of it (the variable itself, or views of its storage such as linear's
// transposed weight) finds the values again once it is gathered back before its layer's
// backward. Its gradient is final once its
// accumulator has run, and its layer's backward node ran before that: it is released then
// (PackExchange::summed), so backward holds at most the layer it is in and the one it gathers
// next (forward too: the layer that computes and the next).
//
//   forward of unit k      gather k (or, if k is already whole, take its values as the chunk:
//                          gathered by gather_values, then perhaps changed in place), start
//                          gathering the next unit (prefetch: the collectives run on a thread of
//                          their own), compute, release k unless a backward follows and k is
//                          kept for it (below);
//   before k's backward    gather k again (a hook on k's output: its gradient is about to flow
//                          into k's node), start gathering the unit before k;
//   k's gradients final    release k; its pack is reduce-scattered into this worker's chunk of
//                          the sums; the sharded step updates owned() in place, no all-gather.
//
// Bytes per step: two all-gathers and one reduce-scatter of each parameter, 1.5x an
// all-reduce (ZeRO's figure), less the gathers that keeping saves. A unit is kept whole from its
// forward to its backward when the units computing in between (those after it) hold at most
// `reuse_bytes` of parameters (DeepSpeed's stage3_max_reuse_distance, in bytes): the last unit
// always (backward starts with it), every unit with reuse_bytes -1 (one gather per step: the
// bytes of an all-reduce, holding the whole model at the turn from forward to backward).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>

#include "collective/communicator.h"

namespace dist {
namespace collective {
class HierarchicalGroup;
}

class ParameterShards {
 public:
  // `params`: the model's parameters (whole); `units`: indices into them per unit, in forward
  // order. Keeps this worker's chunk of each (collective::chunk_range over its elements), then
  // releases them all. `reuse_bytes`: which units stay whole for their backward (above).
  ParameterShards(std::vector<at::Tensor> params, std::vector<std::vector<size_t>> units,
                  std::shared_ptr<collective::HierarchicalGroup> group, int64_t reuse_bytes = 0);
  ~ParameterShards();  // waits for gathers in flight: they write into its storage

  // This worker's chunk of `param`'s elements (1-D), which the sharded step updates in place.
  at::Tensor owned(const at::Tensor& param) const;
  // `param`'s shape, whole or released.
  std::vector<int64_t> sizes(const at::Tensor& param) const;
  // Where owned(param) starts in `param`'s flat elements.
  int64_t begin(const at::Tensor& param) const;
  // owned(param) with `param`'s current values: when it is whole here (gathered, then perhaps
  // changed in place, as set_weights does), its chunk takes them first.
  at::Tensor current_share(const at::Tensor& param);
  int64_t numel(const at::Tensor& param) const;

  void before_forward(size_t unit);
  // `backward_follows`: the unit's output needs a gradient.
  void after_forward(size_t unit, bool backward_follows);
  void before_backward(size_t unit);
  // `param`'s gradient is final: backward needs its values no more.
  void release_parameter(const at::Tensor& param);
  // Before the step changes the chunks: a gather started for a layer that then did not
  // compute (a prefetch whose backward never came) would hold stale values. No collective.
  void release_all();

  // Takes new values for `param`: its whole values, or this worker's share of them (as
  // owned(); a checkpoint reader reads no more). Whole values held here now are stale then,
  // and released: the next forward gathers the new ones. No collective. InvalidArgument for
  // values of another size.
  void restore(const at::Tensor& param, const at::Tensor& values);

  // A collective of every worker: every parameter whole (its current values) until the next
  // forward takes them as the chunks again.
  void gather_all();
  bool all_whole() const;

 private:
  struct Entry {
    at::Tensor param;  // the variable: `whole` while gathered, an empty tensor when released
    std::vector<int64_t> sizes;
    int64_t numel = 0;
    int64_t begin = 0;  // of this worker's chunk in the flat elements
    at::Tensor owned;   // this worker's chunk of the flat elements
    // The whole values' tensor, whose storage is filled in place by a gather and emptied by a
    // release: one storage for the parameter's life, so views of it keep pointing at it.
    at::Tensor whole;
    bool is_whole = true;
    collective::WorkHandle gathering;  // a gather in flight (prefetched)
  };
  size_t index_of(const at::Tensor& param) const;
  void gather(Entry& entry);
  // A gather in two halves: start_gather fills the storage on the collective thread while the
  // caller goes on; finish_gather waits and makes the parameter whole.
  void start_gather(Entry& entry);
  void finish_gather(Entry& entry);
  // Starts gathering the first unit after (`step` 1) or before (-1) `unit` that has parameters
  // not yet whole (units kept whole for their backward are passed over).
  void prefetch(size_t unit, int step);
  void release(Entry& entry);
  void mark_kept_units(int64_t reuse_bytes);
  // A whole parameter's values are the current ones (gathered, then perhaps changed in place,
  // as set_weights does): its chunk takes them.
  void adopt(Entry& entry);
  // Whether this call may gather: inside strategy.run(), or a job of one worker.
  bool can_gather_here() const;

  std::vector<Entry> entries_;
  std::vector<std::vector<size_t>> units_;
  std::vector<bool> kept_for_backward_;            // per unit (reuse_bytes)
  std::unordered_map<const void*, size_t> index_;  // TensorImpl -> entry
  std::shared_ptr<collective::HierarchicalGroup> group_;
  mutable std::mutex mu_;
};

}  // namespace dist
