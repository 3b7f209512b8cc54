// The inline gradient reducer: nothing happens during backward; in apply_gradients every
// replica reduces the packs in order, in place into replica 0's gradients.
#include <ATen/ATen.h>

#include "collective/communicator.h"
#include "distribute/reduction/gradient_reducer.h"

namespace dist {

collective::WorkHandle all_reduce_pack(collective::Communicator& cross_process,
                                       GradientPack& pack) {
  std::vector<at::Tensor> one{pack.buffer};
  return cross_process.all_reduce(one, ReduceOp::kSum);
}

std::vector<std::vector<size_t>> make_packs(const std::vector<at::Tensor>& params, int64_t bytes) {
  std::vector<std::vector<size_t>> packs;
  int64_t filled = 0;
  for (size_t j = params.size(); j-- > 0;) {
    const int64_t size = params[j].numel() * static_cast<int64_t>(params[j].element_size());
    const bool new_dtype =
        !packs.empty() && params[packs.back().front()].scalar_type() != params[j].scalar_type();
    if (packs.empty() || new_dtype || (filled > 0 && filled + size > bytes)) {
      packs.emplace_back();
      filled = 0;
    }
    packs.back().push_back(j);
    filled += size;
  }
  return packs;
}

namespace {

class InlineReducer : public GradientReducer {
 public:
  InlineReducer(std::vector<std::vector<at::Tensor>> params,
                std::vector<collective::Communicator*> communicators, int64_t bytes_per_pack)
      : params_(std::move(params)),
        communicators_(std::move(communicators)),
        packs_(make_packs(params_.at(0), bytes_per_pack)) {}

  void add(int, size_t) override {}

  // Every pack is reduced here, in order, by every replica: no pack lands early, so `landed`
  // is never called (landing_packs() is empty).
  void finalize(int replica, const PackLanded& /*landed*/) override {
    auto& params = params_[static_cast<size_t>(replica)];
    std::vector<at::Tensor> grads;
    grads.reserve(params.size());
    for (auto& p : params) {
      // An empty replica or an unused parameter has no gradient; it still takes part.
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      grads.push_back(p.grad());
    }
    auto& communicator = *communicators_[static_cast<size_t>(replica)];
    for (const auto& indices : packs_) {
      std::vector<at::Tensor> pack;
      pack.reserve(indices.size());
      for (size_t i : indices) pack.push_back(grads[i]);
      communicator.all_reduce_to_process_leader(pack, ReduceOp::kSum)->wait();
    }
  }

 private:
  std::vector<std::vector<at::Tensor>> params_;
  std::vector<collective::Communicator*> communicators_;
  std::vector<std::vector<size_t>> packs_;
};

}  // namespace

std::unique_ptr<GradientReducer> make_inline_reducer(
    std::vector<std::vector<at::Tensor>> params,
    std::vector<collective::Communicator*> communicators, int64_t bytes_per_pack) {
  return std::make_unique<InlineReducer>(std::move(params), std::move(communicators),
                                         bytes_per_pack);
}

}  // namespace dist
