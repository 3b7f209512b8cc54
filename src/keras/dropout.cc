// Dropout (dist/keras/layers.h) whose masks do not depend on how the global batch is split
// over replicas, nor on thread timing, and continue where a resumed run stopped.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <ATen/Dispatch.h>
#include <torch/nn/cloneable.h>

#include "core/intra_op_parallel.h"
#include "dist/core/error.h"
#include "dist/distribute/batch_split.h"
#include "dist/distribute/replica_context.h"
#include "dist/keras/layers.h"
#include "keras/layer_checks.h"

namespace dist::keras {
namespace detail {
namespace {

// Reproducible dropout. F::dropout draws from the global generator, so a global batch split
// over replica threads gets different masks for each replica count (and thread timing), and a
// resumed run does not continue the sequence. Here each element's keep/drop is a pure function
// of (seed, calls, global example index, element index):
//   - `calls` counts the layer's training-mode forwards; it is a buffer of the layer's module,
//     so checkpoints save and restore it, and mirrored copies (each running forward once per
//     step) keep equal counts;
//   - the global example index is the example's place in the step's global batch: a replica's
//     share starts after the shares of the replicas before it (batch_split.h);
//   - the element index is the position within the example in logical (C, H, W) order, so the
//     mask does not depend on memory format.
// The bits come from splitmix64's finalizer applied to a counter: the call key, then a key per
// example, then one output per element. A plain loop over uint64_t (well-defined wrap-around)
// is one pass; the same with int64 tensor ops would take a dozen passes and temporaries.
class DropoutStateImpl : public torch::nn::Cloneable<DropoutStateImpl> {
 public:
  DropoutStateImpl() { reset(); }
  void reset() override { calls = register_buffer("calls", torch::zeros({}, torch::kLong)); }
  at::Tensor calls;  // training-mode forwards so far
};

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;  // 2^64 / golden ratio: splitmix64's step

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Where this replica's examples start in the step's global batch (0 outside strategy.run()).
int64_t first_global_example(int64_t local_batch, const std::string& layer) {
  const ReplicaContext* context = get_replica_context();
  if (context == nullptr || context->num_replicas_in_sync() == 1) return 0;
  const int replicas = context->num_replicas_in_sync();
  const int id = context->replica_id_in_sync_group();
  DIST_CHECK_ARG(context->global_batch_size() >= 0, layer, " runs in replica ", id, " of ",
                 replicas,
                 ", but the step's input did not come from a distributed dataset, so the replica "
                 "cannot tell where its examples sit in the global batch; reproducible Dropout "
                 "numbers examples by that place. Feed strategy.run() batches from "
                 "strategy.experimental_distribute_dataset() or "
                 "distribute_datasets_from_function()");
  const auto sizes = split_sizes(context->global_batch_size(), replicas);
  DIST_CHECK_ARG(local_batch == sizes[static_cast<size_t>(id)], layer, " got ", local_batch,
                 " examples in replica ", id, " of ", replicas,
                 ", but that replica's share of the ", context->global_batch_size(),
                 "-example global batch is ", sizes[static_cast<size_t>(id)],
                 "; reproducible Dropout numbers examples by their place in the global batch, so "
                 "call the model on the replica's own share, not on a concatenation or slice");
  return std::accumulate(sizes.begin(), sizes.begin() + id, int64_t{0});
}

// x * mask, the mask keeping each element with probability 1 - rate and scaling it by
// 1 / (1 - rate). Examples are numbered from `first_example`.
at::Tensor apply_mask(const at::Tensor& x, double rate, uint64_t seed, uint64_t call,
                      int64_t first_example) {
  const int64_t batch = x.size(0);
  const int64_t per_example = batch == 0 ? 0 : x.numel() / batch;
  at::Tensor mask = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  const uint64_t call_key = mix64(mix64(seed) ^ (call + 1) * kGolden);
  // Keep when the top 53 bits, as a fraction of 2^53, are at least `rate`.
  const auto threshold = static_cast<uint64_t>(std::ceil(rate * 9007199254740992.0));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "Dropout", [&] {
    const auto scale = static_cast<scalar_t>(1.0 / (1.0 - rate));
    scalar_t* out = mask.data_ptr<scalar_t>();
    auto fill_examples = [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const auto example = static_cast<uint64_t>(first_example + n);
        const uint64_t key = mix64(call_key + (example + 1) * kGolden);
        scalar_t* row = out + n * per_example;
        for (int64_t i = 0; i < per_example; ++i) {
          const uint64_t bits = mix64(key + static_cast<uint64_t>(i) * kGolden);
          row[i] = (bits >> 11) >= threshold ? scale : scalar_t(0);
        }
      }
    };
    // About 32k elements per task.
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(per_example, 1));
    dist::detail::intra_op_parallel_for(0, batch, grain, fill_examples);
  });
  return x * mask;
}

class DropoutSpec : public LayerSpec {
 public:
  explicit DropoutSpec(double rate) : LayerSpec("Dropout"), rate(rate) {
    DIST_CHECK_ARG(rate >= 0 && rate < 1, "Dropout rate must be in [0, 1), got ", rate);
  }
  std::string default_name() const override { return "dropout"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string&) const override {
    return in[0];
  }
  std::shared_ptr<torch::nn::Module> make_module(const std::vector<Shape>&) const override {
    return std::make_shared<DropoutStateImpl>();
  }
  at::Tensor call(torch::nn::Module* m, const std::vector<at::Tensor>& x,
                  bool training) const override {
    if (!training) return x[0];
    auto* state = dynamic_cast<DropoutStateImpl*>(m);
    DIST_INTERNAL_ASSERT(state != nullptr, "Dropout's module is not a DropoutStateImpl");
    // Counted at rate 0 too, so that every Dropout counts the same steps.
    const int64_t first =
        rate == 0 ? 0 : first_global_example(x[0].size(0), describe(kind(), name));
    const auto call = static_cast<uint64_t>(state->calls.item<int64_t>());
    {
      torch::NoGradGuard no_grad;
      state->calls.add_(1);
    }
    if (rate == 0) return x[0];
    return apply_mask(x[0], rate, seed, call, first);
  }

  double rate;
  uint64_t seed = 0;
};

}  // namespace
}  // namespace detail

namespace layers {

using namespace detail;  // NOLINT: the specs are this file's own

Dropout::Dropout(double rate) : Layer(std::make_shared<DropoutSpec>(rate)) {}
Dropout& Dropout::seed(uint64_t seed) {
  options_of<DropoutSpec>().seed = seed;
  return *this;
}

}  // namespace layers
}  // namespace dist::keras
