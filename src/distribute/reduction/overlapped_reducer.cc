#include "distribute/reduction/overlapped_reducer.h"

#include <algorithm>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include "collective/hierarchical_communicator.h"
#include "dist/core/error.h"
#include "dist/distribute/replica_context.h"

namespace dist {
namespace {

// Runs after a leaf's AccumulateGrad: that replica's gradient of the parameter is final for
// this backward.
class GradientFinalHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradientFinalHook(std::function<void()> on_final) : on_final_(std::move(on_final)) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    on_final_();
    return outputs;
  }

 private:
  std::function<void()> on_final_;
};

}  // namespace

OverlappedReducer::OverlappedReducer(std::vector<std::vector<at::Tensor>> params,
                                     std::vector<std::string> names,
                                     std::vector<std::vector<size_t>> packs,
                                     collective::HierarchicalGroup* group,
                                     const StrategyExtended* owner, PackExchange exchange,
                                     int model)
    : group_(group),
      owner_(owner),
      exchange_(std::move(exchange)),
      params_(std::move(params)),
      names_(std::move(names)),
      packs_(std::move(packs)) {
  const size_t count = params_[0].size();
  for (const auto& p : params_[0]) shapes_.push_back(p.sizes().vec());
  pack_of_.assign(count, 0);
  flat_.resize(packs_.size());
  described_.resize(packs_.size());
  for (size_t k = 0; k < packs_.size(); ++k) {
    int64_t elements = 0;
    offset_.emplace_back();
    for (size_t i : packs_[k]) {
      pack_of_[i] = k;
      offset_[k].push_back(elements);
      elements += numel_of(i);
    }
    described_[k].model = model;
    described_[k].index = k;
    for (size_t i : packs_[k]) described_[k].names.push_back(names_[i]);
    if (!exchange_.frees_gradients) make_buffer(k);  // else each step makes it
  }
  final_.assign(params_.size(), std::vector<bool>(count, false));
  reset_step_locked();
  for (size_t r = 0; r < params_.size(); ++r) {
    for (size_t i = 0; i < count; ++i) {
      auto accumulator = torch::autograd::impl::grad_accumulator(params_[r][i]);
      if (!accumulator) continue;  // a frozen parameter: it counts as zero in finalize
      hook_keys_.push_back(accumulator->add_post_hook(
          std::make_unique<GradientFinalHook>([this, r, i] { add(static_cast<int>(r), i); })));
      accumulators_.push_back(std::move(accumulator));
    }
  }
}

OverlappedReducer::~OverlappedReducer() {
  for (size_t h = 0; h < accumulators_.size(); ++h) accumulators_[h]->del_post_hook(hook_keys_[h]);
  // Packs still on their way write into flat_: let them land.
  for (auto& work : issued_) {
    try {
      work->wait();
    } catch (...) {
    }
  }
}

void OverlappedReducer::add(int replica, size_t param) {
  // Only inside a step of this strategy's replicas: gradients computed in cross-replica code
  // are reduced by finalize.
  const ReplicaContext* context = get_replica_context();
  if (context == nullptr || context->strategy() != owner_) return;
  int64_t completed;
  bool first_in_this_backward = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    completed = mark_locked(replica, param);
    if (completed >= 0) ++ready_in_backward_;
    first_in_this_backward = !end_of_backward_queued_[static_cast<size_t>(replica)];
    end_of_backward_queued_[static_cast<size_t>(replica)] = true;
  }
  if (first_in_this_backward) {
    // Runs when this backward pass ends, still on this replica's thread.
    torch::autograd::Engine::get_default_engine().queue_callback(
        [this, replica] { finish_backward(replica); });
  }
  if (completed >= 0) reduce_in_process_and_issue(static_cast<size_t>(completed));
}

int64_t OverlappedReducer::mark_locked(int replica, size_t param) {
  auto& marks = final_[static_cast<size_t>(replica)];
  if (marks[param]) {
    if (accumulated_twice_.empty()) accumulated_twice_ = names_[param];
    return -1;
  }
  marks[param] = true;
  step_active_ = true;
  const size_t pack = pack_of_[param];
  return --missing_[pack] == 0 ? static_cast<int64_t>(pack) : -1;
}

void OverlappedReducer::reduce_in_process_and_issue(size_t pack) {
  // Every replica's gradients of this pack are final and nobody writes them until the step
  // ends, so no lock is needed to read them.
  if (!send_gradient_itself(pack)) {
    torch::NoGradGuard no_grad;
    make_buffer(pack);
    for (size_t pos = 0; pos < packs_[pack].size(); ++pos) {
      const size_t i = packs_[pack][pos];
      at::Tensor out = flat_[pack].narrow(0, offset_[pack][pos], numel_of(i));
      const at::Tensor& grad = params_[0][i].grad();
      if (grad.data_ptr() != out.data_ptr()) out.copy_(grad.reshape(-1));  // else accumulated there
      for (size_t r = 1; r < params_.size(); ++r) out.add_(params_[r][i].grad().reshape(-1));
      if (exchange_.frees_gradients)
        for (auto& replica : params_) replica[i].mutable_grad().reset();
    }
  }
  if (exchange_.summed) {
    std::vector<at::Tensor> params;
    for (size_t i : packs_[pack]) params.push_back(params_[0][i]);
    exchange_.summed(described_[pack].model, params);
  }
  std::lock_guard<std::mutex> lock(mu_);
  reduced_[pack] = true;
  if (exchange_.after_backward) return;  // write_results issues it
  // Strictly in pack order: a pack completed early waits for the ones before it.
  while (issued_.size() < packs_.size() && reduced_[issued_.size()]) {
    const size_t next = issued_.size();
    described_[next].step = steps_reduced_;
    issued_.push_back(exchange_.communicate(group_->cross_process(), described_[next]));
    if (exchange_.frees_gradients) free_sent_buffers_locked();
  }
}

void OverlappedReducer::free_sent_buffers_locked() {
  size_t in_flight = 0;
  for (size_t k = 0; k < issued_.size(); ++k) in_flight += flat_[k].defined() ? 1 : 0;
  for (size_t k = 0; k < issued_.size(); ++k) {
    if (!flat_[k].defined()) continue;
    // A communication done (in the call, or on its thread) needs the pack no more; beyond
    // the bound, the oldest are waited for.
    const bool over = exchange_.packs_in_flight > 0 && in_flight > exchange_.packs_in_flight;
    if (over) issued_[k]->wait();
    if (!over && !issued_[k]->is_completed()) continue;
    free_buffer(k);
    --in_flight;
  }
}

void OverlappedReducer::mark_rest_locked(int replica, std::vector<size_t>& completed) {
  auto& params = params_[static_cast<size_t>(replica)];
  for (size_t i = 0; i < params.size(); ++i) {
    if (final_[static_cast<size_t>(replica)][i]) continue;
    // An unmarked parameter is read by no one until it is marked here.
    if (!params[i].grad().defined())
      params[i].mutable_grad() = at::zeros(shapes_[i], params[i].options());
    const int64_t pack = mark_locked(replica, i);
    if (pack >= 0) completed.push_back(static_cast<size_t>(pack));
  }
}

void OverlappedReducer::finish_backward(int replica) {
  std::vector<size_t> completed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mark_rest_locked(replica, completed);
  }
  for (size_t pack : completed) reduce_in_process_and_issue(pack);
}

void OverlappedReducer::complete_step() {
  std::vector<size_t> completed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!step_active_) return;
    for (size_t r = 0; r < params_.size(); ++r) mark_rest_locked(static_cast<int>(r), completed);
  }
  for (size_t pack : completed) reduce_in_process_and_issue(pack);
}

void OverlappedReducer::finalize(int replica, const PackLanded& landed) {
  finish_backward(replica);
  // Once every local replica is here, every pack has been issued; one thread collects them.
  group_->local().barrier(replica, "apply_gradients", [&] { write_results(landed); });
}

std::vector<std::vector<at::Tensor>> OverlappedReducer::landing_packs() const {
  std::vector<std::vector<at::Tensor>> packs;
  for (const auto& pack : packs_) {
    packs.emplace_back();
    for (size_t i : pack) packs.back().push_back(params_[0][i]);
  }
  return packs;
}

void OverlappedReducer::write_results(const PackLanded& landed) {
  std::vector<collective::WorkHandle> issued;
  std::string twice;
  {
    std::lock_guard<std::mutex> lock(mu_);
    DIST_INTERNAL_ASSERT(
        issued_.size() == packs_.size() ||
            (exchange_.after_backward && std::count(reduced_.begin(), reduced_.end(), true) ==
                                             static_cast<std::ptrdiff_t>(packs_.size())),
        "finalize before every replica finished backward");
    issued.swap(issued_);
    twice = accumulated_twice_;
    last_ready_in_backward_ = ready_in_backward_;
    ++steps_reduced_;
    reset_step_locked();
  }
  size_t waited = 0;
  try {
    // Checked before any pack is stepped: such a step must change nothing.
    if (!twice.empty()) {
      for (; waited < issued.size(); ++waited) issued[waited]->wait();
      throw InvalidArgument(detail::concat(
          "the gradient of parameter '", twice,
          "' was accumulated twice in one step (backward called twice before apply_gradients); "
          "with gradient reduction overlapped with backward, call backward once per step; "
          "where one model's loss reaches another model (a GAN), take each model's gradients "
          "with dist::backward(loss, model) (dist/distribute/model_gradients.h); or set "
          "CommunicationOptions::overlap_with_backward = false to accumulate gradients over "
          "several backward passes"));
    }
    for (; waited < packs_.size(); ++waited) {
      if (exchange_.after_backward) {
        described_[waited].step = steps_reduced_ - 1;  // this step's (counted above)
        issued.push_back(exchange_.communicate(group_->cross_process(), described_[waited]));
      }
      issued[waited]->wait();
      if (exchange_.lands_in_gradients) land(waited);
      if (landed) landed(waited);
      if (exchange_.frees_gradients) free_buffer(waited);
    }
  } catch (...) {
    // Packs still on their way write into flat_: let them land before it is used again.
    for (size_t k = waited + 1; k < issued.size(); ++k) {
      try {
        issued[k]->wait();
      } catch (...) {
      }
    }
    throw;
  }
}

void OverlappedReducer::land(size_t pack) {
  torch::NoGradGuard no_grad;
  for (size_t pos = 0; pos < packs_[pack].size(); ++pos) {
    at::Tensor grad = params_[0][packs_[pack][pos]].mutable_grad();
    grad.copy_(flat_[pack].narrow(0, offset_[pack][pos], grad.numel()).view(grad.sizes()));
  }
}

void OverlappedReducer::make_buffer(size_t pack) {
  if (flat_[pack].defined()) return;
  const at::Tensor& first = params_[0][packs_[pack].front()];
  int64_t elements = 0;
  for (size_t i : packs_[pack]) elements += numel_of(i);
  // Zeros where backward will accumulate into it (gradients_in_pack).
  flat_[pack] = exchange_.gradients_in_pack ? at::zeros({elements}, first.options())
                                            : at::empty({elements}, first.options());
  GradientPack& described = described_[pack];
  described.buffer = flat_[pack];
  described.gradients.clear();
  for (size_t pos = 0; pos < packs_[pack].size(); ++pos) {
    const size_t i = packs_[pack][pos];
    at::Tensor param = params_[0][i];
    described.gradients.push_back(
        flat_[pack].narrow(0, offset_[pack][pos], numel_of(i)).view(shapes_[i]));
    if (exchange_.gradients_in_pack && param.requires_grad())
      param.mutable_grad() = described.gradients.back();
  }
}

bool OverlappedReducer::send_gradient_itself(size_t pack) {
  // A pack of one parameter of one replica whose gradient is freed anyway, or which the
  // communication only reads (gradients_in_pack): the gradient can be the pack's buffer (the
  // largest layers make packs of their own: a copy of their size saved, each step: zero_grad
  // drops the gradients, so backward makes new ones rather than adding into the pack's view).
  if (!(exchange_.frees_gradients || exchange_.gradients_in_pack) || params_.size() != 1 ||
      packs_[pack].size() != 1)
    return false;
  at::Tensor& grad = params_[0][packs_[pack][0]].mutable_grad();
  if (!grad.defined() || !grad.is_contiguous()) return false;
  flat_[pack] = grad.view(-1);
  described_[pack].buffer = flat_[pack];
  described_[pack].gradients = {grad};
  if (exchange_.frees_gradients) grad.reset();  // the pack's buffer holds it until sent
  return true;
}

void OverlappedReducer::free_buffer(size_t pack) {
  flat_[pack].reset();
  described_[pack].buffer.reset();
  described_[pack].gradients.clear();
}

size_t OverlappedReducer::packs_ready_in_backward() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_ready_in_backward_;
}

void OverlappedReducer::settle() {
  std::vector<collective::WorkHandle> issued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!step_active_) return;
    issued.swap(issued_);
    ++steps_reduced_;
    reset_step_locked();
  }
  for (auto& work : issued) work->wait();  // every process sent the same packs
}

int64_t OverlappedReducer::numel_of(size_t param) const {
  int64_t numel = 1;
  for (int64_t size : shapes_[param]) numel *= size;
  return numel;
}

void OverlappedReducer::reset_step_locked() {
  for (auto& replica : final_) std::fill(replica.begin(), replica.end(), false);
  end_of_backward_queued_.assign(params_.size(), false);
  missing_.clear();
  for (const auto& pack : packs_)
    missing_.push_back(static_cast<int64_t>(pack.size() * params_.size()));
  reduced_.assign(packs_.size(), false);
  issued_.clear();
  step_active_ = false;
  ready_in_backward_ = 0;
  accumulated_twice_.clear();
}

}  // namespace dist
