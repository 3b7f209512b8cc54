// The inline and overlapped gradient reductions (gradient_reduction.h).
#include "distribute/reduction/gradient_reduction.h"

#include "collective/hierarchical_communicator.h"
#include "distribute/reduction/backward_collective.h"
#include "distribute/reduction/overlapped_reducer.h"

namespace dist {

std::shared_ptr<GradientReducer> GradientReduction::make_reducer(
    std::vector<std::vector<at::Tensor>> params, std::vector<std::string> names, int model) {
  std::shared_ptr<GradientReducer> reducer = make(std::move(params), std::move(names), model);
  std::lock_guard<std::mutex> lock(mu_);
  reducers_.push_back(reducer);
  return reducer;
}

void GradientReduction::settle() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = reducers_.begin(); it != reducers_.end();) {
    if (auto reducer = it->lock()) {
      reducer->settle();
      ++it;
    } else {
      it = reducers_.erase(it);
    }
  }
}

namespace {

class InlineReduction : public GradientReduction {
 public:
  InlineReduction(std::vector<collective::Communicator*> members, int64_t bytes_per_pack)
      : members_(std::move(members)), bytes_per_pack_(bytes_per_pack) {}

 protected:
  std::shared_ptr<GradientReducer> make(std::vector<std::vector<at::Tensor>> params,
                                        std::vector<std::string>, int) override {
    return make_inline_reducer(std::move(params), members_, bytes_per_pack_);
  }

 private:
  std::vector<collective::Communicator*> members_;
  int64_t bytes_per_pack_;
};

class OverlappedReduction : public GradientReduction {
 public:
  OverlappedReduction(collective::HierarchicalGroup* group, const StrategyExtended* owner,
                      int64_t bytes_per_pack, PackExchange exchange)
      : group_(group),
        owner_(owner),
        bytes_per_pack_(bytes_per_pack),
        exchange_(std::move(exchange)) {
    // Only reducers that send packs on their own need the others to wait for them. Not inside
    // backward: there the replicas are still producing the step's gradients, and their packs
    // and the collective are issued in the same autograd order everywhere
    // (backward_collective.h).
    group_->set_before_cross_stage([this] {
      if (!in_backward_collective()) complete_steps();
    });
  }
  ~OverlappedReduction() override { group_->set_before_cross_stage(nullptr); }

  void complete_steps() const override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& weak : reducers_)
      if (auto reducer = weak.lock()) reducer->complete_step();
  }

 protected:
  std::shared_ptr<GradientReducer> make(std::vector<std::vector<at::Tensor>> params,
                                        std::vector<std::string> names, int model) override {
    auto packs = make_packs(params[0], bytes_per_pack_);
    return std::make_shared<OverlappedReducer>(std::move(params), std::move(names),
                                               std::move(packs), group_, owner_, exchange_, model);
  }

 private:
  collective::HierarchicalGroup* group_;
  const StrategyExtended* owner_;
  int64_t bytes_per_pack_;
  PackExchange exchange_;
};

}  // namespace

std::unique_ptr<GradientReduction> make_inline_reduction(
    std::vector<collective::Communicator*> members, int64_t bytes_per_pack) {
  return std::make_unique<InlineReduction>(std::move(members), bytes_per_pack);
}

std::unique_ptr<GradientReduction> make_overlapped_reduction(collective::HierarchicalGroup* group,
                                                             const StrategyExtended* owner,
                                                             int64_t bytes_per_pack,
                                                             PackExchange exchange) {
  return std::make_unique<OverlappedReduction>(group, owner, bytes_per_pack, std::move(exchange));
}

}  // namespace dist
