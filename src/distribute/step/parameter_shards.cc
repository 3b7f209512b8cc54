// ZeRO stage 3's parameter shards (parameter_shards.h).
#include "distribute/step/parameter_shards.h"

#include <ATen/ATen.h>

#include <string>
#include <utility>

#include "collective/communicator.h"
#include "collective/hierarchical_communicator.h"
#include "dist/core/error.h"
#include "dist/core/timeline.h"
#include "dist/distribute/replica_context.h"

namespace dist {

ParameterShards::ParameterShards(std::vector<at::Tensor> params,
                                 std::vector<std::vector<size_t>> units,
                                 std::shared_ptr<collective::HierarchicalGroup> group,
                                 int64_t reuse_bytes)
    : units_(std::move(units)), group_(std::move(group)) {
  DIST_INTERNAL_ASSERT(reuse_bytes >= -1, "reuse bytes ", reuse_bytes);  // the strategy checks
  collective::Communicator& cross = group_->cross_process();
  at::NoGradGuard no_grad;
  for (auto& param : params) {
    Entry entry;
    entry.sizes = param.sizes().vec();
    entry.numel = param.numel();
    const auto [begin, end] = collective::chunk_range(entry.numel, cross.size(), cross.rank());
    entry.begin = begin;
    entry.owned = param.detach().reshape(-1).narrow(0, begin, end - begin).clone();
    entry.whole = at::empty(entry.sizes, entry.owned.options());
    entry.param = std::move(param);
    index_[entry.param.unsafeGetTensorImpl()] = entries_.size();
    entries_.push_back(std::move(entry));
    release(entries_.back());  // one at a time: the model is never held twice
  }
  mark_kept_units(reuse_bytes);
}

void ParameterShards::mark_kept_units(int64_t reuse_bytes) {
  // From the last unit back: the parameters computing between unit k's forward and its
  // backward are those of the units after k.
  kept_for_backward_.assign(units_.size(), false);
  int64_t bytes_after = 0;
  bool last_seen = false;
  for (size_t k = units_.size(); k-- > 0;) {
    if (units_[k].empty()) continue;
    kept_for_backward_[k] = !last_seen || reuse_bytes < 0 || bytes_after <= reuse_bytes;
    last_seen = true;
    for (size_t i : units_[k])
      bytes_after += entries_[i].numel * static_cast<int64_t>(entries_[i].owned.element_size());
  }
}

size_t ParameterShards::index_of(const at::Tensor& param) const {
  auto it = index_.find(param.unsafeGetTensorImpl());
  DIST_INTERNAL_ASSERT(it != index_.end(), "a parameter the shards do not hold");
  return it->second;
}

at::Tensor ParameterShards::owned(const at::Tensor& param) const {
  return entries_[index_of(param)].owned;
}

std::vector<int64_t> ParameterShards::sizes(const at::Tensor& param) const {
  return entries_[index_of(param)].sizes;
}

int64_t ParameterShards::begin(const at::Tensor& param) const {
  return entries_[index_of(param)].begin;
}

at::Tensor ParameterShards::current_share(const at::Tensor& param) {
  std::lock_guard<std::mutex> lock(mu_);
  at::NoGradGuard no_grad;
  Entry& entry = entries_[index_of(param)];
  if (entry.is_whole) adopt(entry);
  return entry.owned;
}

int64_t ParameterShards::numel(const at::Tensor& param) const {
  return entries_[index_of(param)].numel;
}

ParameterShards::~ParameterShards() {
  for (auto& entry : entries_) {
    if (!entry.gathering) continue;
    try {
      entry.gathering->wait();
    } catch (...) {  // a failed collective: the job is failing already
    }
  }
}

void ParameterShards::start_gather(Entry& entry) {
  c10::StorageImpl* storage = entry.whole.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(entry.numel) * entry.whole.element_size();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
  at::Tensor flat = entry.whole.view(-1);
  entry.gathering = group_->cross_process().all_gather_into(entry.owned, flat);
}

void ParameterShards::finish_gather(Entry& entry) {
  const collective::WorkHandle work = std::move(entry.gathering);
  entry.gathering.reset();
  work->wait();
  entry.param.set_data(entry.whole);
  entry.is_whole = true;
}

void ParameterShards::gather(Entry& entry) {
  if (!entry.gathering) start_gather(entry);
  finish_gather(entry);
}

void ParameterShards::prefetch(size_t unit, int step) {
  // Only where the rings run on a thread of their own (several workers): one worker would
  // gather in the call, holding two layers whole for nothing.
  if (group_->num_processes() == 1 || !can_gather_here()) return;
  for (auto k = static_cast<int64_t>(unit) + step;
       k >= 0 && k < static_cast<int64_t>(units_.size()); k += step) {
    bool all_whole = true;
    for (size_t i : units_[static_cast<size_t>(k)]) {
      if (entries_[i].is_whole) continue;
      all_whole = false;
      if (!entries_[i].gathering) start_gather(entries_[i]);
    }
    if (!all_whole) return;  // else a unit kept whole: the next one may need its gather
  }
}

void ParameterShards::release_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& entry : entries_)
    if (entry.is_whole || entry.gathering) release(entry);
}

void ParameterShards::release(Entry& entry) {
  if (entry.gathering) finish_gather(entry);  // the collective writes into the storage
  // The values go from the storage itself: autograd may hold views of it (linear saves the
  // transposed weight), which find the values again when the next gather fills it in place.
  c10::StorageImpl* storage = entry.whole.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, storage->device()));
  storage->set_nbytes(0);
  // And the variable is an empty tensor meanwhile: a read of a released parameter fails on its
  // shape instead of reading storage that is not there.
  entry.param.set_data(at::empty({0}, entry.owned.options()));
  entry.is_whole = false;
}

void ParameterShards::adopt(Entry& entry) {
  entry.owned.copy_(entry.param.detach().reshape(-1).narrow(0, entry.begin, entry.owned.numel()));
}

bool ParameterShards::can_gather_here() const {
  // A gather is a collective of every worker: inside strategy.run() every worker computes the
  // same layers in the same order, outside it only this one may be computing.
  return group_->num_processes() == 1 || get_replica_context() != nullptr;
}

void ParameterShards::before_forward(size_t unit) {
  TimelineSpan span("gather layer", "sharding");
  span.arg("layer", static_cast<int64_t>(unit));
  std::lock_guard<std::mutex> lock(mu_);
  at::NoGradGuard no_grad;
  for (size_t i : units_.at(unit)) {
    Entry& entry = entries_[i];
    if (entry.gathering) continue;  // prefetched
    if (entry.is_whole) {
      adopt(entry);
      continue;
    }
    DIST_CHECK_ARG(can_gather_here(),
                   "sharding 'parameters': the model was called outside strategy.run() on one of ",
                   group_->num_processes(),
                   " workers, and its layers are in shares that only all of them together can "
                   "gather; call it inside strategy.run() on every worker, or call "
                   "variables().gather_values() on every worker first");
    start_gather(entry);
  }
  // The next layer's gather runs while this one computes (FSDP's forward prefetch).
  prefetch(unit, 1);
  for (size_t i : units_.at(unit))
    if (entries_[i].gathering) finish_gather(entries_[i]);
}

void ParameterShards::after_forward(size_t unit, bool backward_follows) {
  // Backward starts with the last unit: keeping it saves gathering it again at once; others
  // are kept as reuse_bytes says. Outside run() with several workers, whole values (gathered
  // by gather_values) stay: this worker could not gather them again alone.
  if ((backward_follows && kept_for_backward_.at(unit)) || !can_gather_here()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i : units_.at(unit)) release(entries_[i]);
}

void ParameterShards::before_backward(size_t unit) {
  TimelineSpan span("gather layer", "sharding");
  span.arg("layer", static_cast<int64_t>(unit));
  span.arg("backward", 1);
  std::lock_guard<std::mutex> lock(mu_);
  at::NoGradGuard no_grad;
  for (size_t i : units_.at(unit))
    if (!entries_[i].is_whole && !entries_[i].gathering) start_gather(entries_[i]);
  // The previous layer's gather runs while this one's backward computes.
  prefetch(unit, -1);
  for (size_t i : units_.at(unit))
    if (entries_[i].gathering) finish_gather(entries_[i]);
}

void ParameterShards::release_parameter(const at::Tensor& param) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& entry = entries_[index_of(param)];
  if (entry.is_whole) release(entry);
}

void ParameterShards::restore(const at::Tensor& param, const at::Tensor& values) {
  std::lock_guard<std::mutex> lock(mu_);
  at::NoGradGuard no_grad;
  Entry& entry = entries_[index_of(param)];
  const int64_t kept = entry.owned.numel();
  DIST_CHECK_ARG(values.numel() == kept || values.numel() == entry.numel, "restore: values of ",
                 values.numel(), " elements for a parameter of shape ",
                 at::IntArrayRef(entry.sizes), " of which this worker keeps ", kept,
                 "; give its whole values or this worker's share of them");
  if (entry.is_whole || entry.gathering) release(entry);
  const at::Tensor flat = values.reshape(-1);
  entry.owned.copy_(flat.numel() == kept ? flat : flat.narrow(0, entry.begin, kept));
}

void ParameterShards::gather_all() {
  std::lock_guard<std::mutex> lock(mu_);
  at::NoGradGuard no_grad;
  for (auto& entry : entries_)
    if (!entry.is_whole && !entry.gathering) start_gather(entry);
  for (auto& entry : entries_)
    if (entry.gathering) finish_gather(entry);
}

bool ParameterShards::all_whole() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& entry : entries_)
    if (!entry.is_whole) return false;
  return true;
}

}  // namespace dist
