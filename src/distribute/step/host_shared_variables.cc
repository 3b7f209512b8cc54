#include "distribute/step/host_shared_variables.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cstring>

#include "collective/communicator.h"
#include "dist/core/error.h"

namespace dist {
namespace {

// Each value starts on a cache line of its own, as a fresh allocation would.
constexpr size_t kAlign = 64;

size_t padded_bytes(const at::Tensor& t) { return (t.nbytes() + kAlign - 1) / kAlign * kAlign; }

void hold(const HostSharedVariables::Holders& holders, const at::Tensor& storage) {
  torch::NoGradGuard no_grad;
  for (at::Tensor handle : holders) handle.set_data(storage);  // the handle's impl is shared
}

}  // namespace

bool HostSharedVariables::in_region(const at::Tensor& t) const {
  const auto* p = static_cast<const char*>(t.data_ptr());
  const auto* base = static_cast<const char*>(region_.get());
  return region_ != nullptr && p >= base && p < base + bytes_;
}

bool HostSharedVariables::holds(const std::vector<Holders>& values) const {
  if (region_ == nullptr || values.size() != places_.size()) return false;
  for (size_t i = 0; i < values.size(); ++i)
    for (const auto& t : values[i])
      if (t.data_ptr() != places_[i]) return false;
  return true;
}

bool HostSharedVariables::share(const std::vector<Holders>& values,
                                collective::Communicator& workers) {
  size_t bytes = 0;
  for (const auto& holders : values) {
    DIST_INTERNAL_ASSERT(!holders.empty() && holders[0].is_contiguous() &&
                         holders[0].device().is_cpu());
    bytes += padded_bytes(holders[0]);
  }
  std::shared_ptr<void> region =
      workers.share_memory(static_cast<int64_t>(std::max<size_t>(bytes, kAlign)));
  if (region == nullptr) return false;
  char* base = static_cast<char*>(region.get());
  // Worker 0's contents for everyone (the workers' copies are equal here), written before
  // anyone's tensors point at them.
  if (workers.rank() == 0) {
    size_t offset = 0;
    for (const auto& holders : values) {
      std::memcpy(base + offset, holders[0].data_ptr(), holders[0].nbytes());
      offset += padded_bytes(holders[0]);
    }
  }
  workers.barrier()->wait();
  std::vector<const void*> places;
  size_t offset = 0;
  for (const auto& holders : values) {
    const at::Tensor& first = holders[0];
    at::Tensor storage = at::from_blob(
        base + offset, first.sizes(), [region](void*) {},
        at::TensorOptions().dtype(first.scalar_type()));
    hold(holders, storage);
    places.push_back(base + offset);
    offset += padded_bytes(first);
  }
  region_ = std::move(region);
  bytes_ = bytes;
  places_ = std::move(places);
  versions_.clear();
  return true;
}

void HostSharedVariables::remember_versions(const std::vector<Holders>& parameters) {
  versions_.clear();
  for (const auto& holders : parameters)
    for (const auto& t : holders) versions_.push_back(static_cast<int64_t>(t._version()));
}

bool HostSharedVariables::written_outside_steps(const std::vector<Holders>& parameters) const {
  size_t i = 0;
  for (const auto& holders : parameters)
    for (const auto& t : holders) {
      if (i >= versions_.size()) return false;  // no shared step yet
      if (static_cast<int64_t>(t._version()) != versions_[i++]) return true;
    }
  return false;
}

void HostSharedVariables::unshare(const std::vector<Holders>& values) {
  for (const auto& holders : values)
    if (!holders.empty() && in_region(holders[0])) hold(holders, holders[0].detach().clone());
  region_.reset();
  bytes_ = 0;
  places_.clear();
  versions_.clear();
}

}  // namespace dist
