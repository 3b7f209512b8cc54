#include "collective/shm/same_host_communicator.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <numeric>

#include "collective/shm/shared_segment.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

// Copies elements [begin, begin + count) of the concatenation of `flat` (1-D tensors) to
// `buffer` (count elements), or from it when `into_flat`.
void copy_range(const std::vector<at::Tensor>& flat, int64_t begin, int64_t count,
                const at::Tensor& buffer, bool into_flat) {
  int64_t start = 0;  // of the current tensor in the concatenation
  for (const auto& t : flat) {
    const int64_t lo = std::max(begin, start), hi = std::min(begin + count, start + t.numel());
    if (lo < hi) {
      at::Tensor part = t.slice(0, lo - start, hi - start);
      at::Tensor window = buffer.slice(0, lo - begin, hi - begin);
      if (into_flat)
        part.copy_(window);
      else
        window.copy_(part);
    }
    start += t.numel();
    if (start >= begin + count) break;
  }
}

// 1-D views of `tensors`, through contiguous copies for strided ones (copy_back returns those).
std::vector<at::Tensor> flat_views(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.contiguous().view(-1));
  return flat;
}

void copy_back(const std::vector<at::Tensor>& flat, std::vector<at::Tensor>& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (flat[i].data_ptr() != tensors[i].data_ptr())
      tensors[i].copy_(flat[i].view(tensors[i].sizes()));
}

// Member 0 makes a segment with `create`; the others map it with `open(name)`, the name
// published through `inner`. Every member learns whether all of them mapped it: then each holds
// it (and the name is gone from /dev/shm); otherwise none does and `reasons` says why, per
// member. `Mapped` has name() and unlink().
template <typename Mapped, typename Create, typename Open>
std::optional<Mapped> map_on_every_member(Communicator& inner, const std::string& key,
                                          Create create, Open open, std::string& reasons) {
  std::optional<Mapped> mapped;
  std::string refused;  // why this member has no mapping ("" when it has one)
  std::string created;  // member 0: "ok <name>" or "failed"
  if (inner.rank() == 0) {
    try {
      mapped.emplace(create());
      created = "ok " + mapped->name();
    } catch (const std::exception& e) {
      refused = e.what();
      created = "failed";
    }
  }
  const auto announced = inner.exchange(key + "/segment", created);
  if (inner.rank() != 0) {
    if (announced[0].rfind("ok ", 0) == 0) {
      try {
        mapped.emplace(open(announced[0].substr(3)));
      } catch (const std::exception& e) {
        refused = e.what();
      }
    } else {
      refused = "-";  // member 0 has none to open
    }
  }
  const auto opened = inner.exchange(key + "/opened", refused);
  // Everyone mapped it or gave up: the name is no longer needed.
  if (mapped && inner.rank() == 0) mapped->unlink();
  bool everyone = true;
  for (int m = 0; m < inner.size(); ++m) {
    const std::string& why = opened[static_cast<size_t>(m)];
    everyone = everyone && why.empty();
    if (!why.empty() && why != "-")
      reasons += detail::concat(reasons.empty() ? "" : "; ", inner.member_name(m), ": ", why);
  }
  if (!everyone) mapped.reset();
  return mapped;
}

}  // namespace

SameHostCommunicator::SameHostCommunicator(std::unique_ptr<Communicator> inner, int64_t slot_bytes,
                                           std::chrono::milliseconds timeout)
    : inner_(std::move(inner)), timeout_(timeout) {
  std::string reasons;
  auto formed = map_on_every_member<SharedMemoryGroup>(
      *inner_, "shared-memory", [&] { return SharedMemoryGroup::create(size(), slot_bytes); },
      [&](const std::string& name) { return SharedMemoryGroup::open(name, rank()); }, reasons);
  if (formed) group_.emplace(std::move(*formed));
  if (!group_ && rank() == 0)
    std::cerr << "warning: the workers on this host cannot share memory (" << reasons
              << "); their collectives go over TCP (Gloo), which is slower" << std::endl;
}

std::shared_ptr<void> SameHostCommunicator::share_memory(int64_t bytes) {
  DIST_CHECK_ARG(bytes > 0, "share_memory needs a positive size, got ", bytes);
  if (!group_) return nullptr;
  std::string reasons;
  auto segment = map_on_every_member<SharedSegment>(
      *inner_, detail::concat("shared-memory/region-", regions_shared_++),
      [&] { return SharedSegment::create(static_cast<size_t>(bytes)); },
      [&](const std::string& name) { return SharedSegment::open(name); }, reasons);
  if (!segment) {
    if (rank() == 0)
      std::cerr << "warning: the workers on this host cannot share " << bytes
                << " bytes of memory (" << reasons << "); each keeps its own copy" << std::endl;
    return nullptr;
  }
  auto owner = std::make_shared<SharedSegment>(std::move(*segment));
  return std::shared_ptr<void>(owner, owner->data());
}

template <typename Body>
void SameHostCommunicator::guarded(const std::string& what, Body body) {
  DIST_CHECK(!failed_, CollectiveError, what, " on ", member_name(rank()),
             ": this communicator failed earlier (a worker was lost); recreate the strategy");
  try {
    body();
  } catch (...) {
    failed_ = true;
    throw;
  }
}

void SameHostCommunicator::wait_for_all(const char* what) {
  group_->arrive_and_wait(what, sequence_, timeout_, [this](int m) { return member_name(m); });
}

void SameHostCommunicator::check_same_collective(const Fingerprint& mine) {
  bool same = true;
  for (int m = 0; m < size(); ++m) same = same && group_->fingerprint(m, sequence_) == mine;
  if (same) return;
  // Every member read the same fingerprints, so every member throws this.
  std::string issued;
  for (int m = 0; m < size(); ++m)
    issued += detail::concat(m == 0 ? "" : ", ", member_name(m), " issued ",
                             describe(group_->fingerprint(m, sequence_)));
  throw CollectiveError(detail::concat(
      "collective mismatch at collective #", sequence_, ": ", issued,
      "; the workers are running different steps (different settings, data or code): start "
      "every worker with the same settings"));
}

WorkHandle SameHostCommunicator::all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) {
  if (!group_) return inner_->all_reduce(tensors, op);
  if (tensors.empty()) return completed_work();
  for (const auto& t : tensors)
    DIST_CHECK_ARG(t.scalar_type() == tensors[0].scalar_type() && t.device().is_cpu(),
                   "all_reduce needs CPU tensors of one dtype, got ", t.scalar_type(), " on ",
                   t.device(), " after ", tensors[0].scalar_type());
  guarded("all_reduce", [&] {
    const Fingerprint mine = fingerprint_of(all_reduce_kind(op), tensors);
    group_->publish(++sequence_, mine);
    std::vector<at::Tensor> flat = flat_views(tensors);
    const auto options = at::TensorOptions().dtype(tensors[0].scalar_type());
    const int64_t capacity = group_->slot_bytes() / static_cast<int64_t>(tensors[0].element_size());
    const int64_t total = mine.elements;
    int64_t done = 0;
    do {
      const int64_t n = std::min(capacity, total - done);
      copy_range(flat, done, n, at::from_blob(group_->slot(rank()), {n}, options), false);
      wait_for_all("all_reduce");  // every slot is full
      if (done == 0) check_same_collective(mine);
      const auto [begin, end] = chunk_range(n, size(), rank());
      if (end > begin) {
        std::vector<at::Tensor> shares;
        for (int m = 0; m < size(); ++m)
          shares.push_back(at::from_blob(group_->slot(m), {n}, options).slice(0, begin, end));
        at::Tensor out = at::from_blob(group_->results(), {n}, options).slice(0, begin, end);
        reduce_in_order(op, out, shares, /*out_is_first=*/false);
      }
      // Every share is reduced. Nobody writes the results again before every member reached
      // the next collective's first barrier, so copying out needs no barrier after it.
      wait_for_all("all_reduce");
      copy_range(flat, done, n, at::from_blob(group_->results(), {n}, options), true);
      done += n;
    } while (done < total);
    if (op == ReduceOp::kMean)
      for (auto& f : flat) divide_for_mean(f, size());
    copy_back(flat, tensors);
  });
  return completed_work();
}

WorkHandle SameHostCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                                ReduceOp op) {
  if (!group_) return inner_->reduce_scatter(input, output, op);
  const at::Tensor flat = input.contiguous().reshape(-1);
  const int64_t rows = input.dim() == 0 ? 1 : input.size(0);
  const int64_t row_elements = rows == 0 ? 0 : flat.numel() / rows;
  const auto [first_row, end_row] = chunk_range(rows, size(), rank());
  const int64_t begin = first_row * row_elements, end = end_row * row_elements;
  DIST_CHECK_ARG(output.numel() == end - begin && output.is_contiguous(), "reduce_scatter on ",
                 member_name(rank()), ": the output has ", output.numel(),
                 " elements (contiguous), but this member's chunk has ", end - begin);
  guarded("reduce_scatter", [&] {
    const Fingerprint mine{reduce_scatter_kind(op), flat.numel(),
                           static_cast<int64_t>(flat.scalar_type()), rows};
    group_->publish(++sequence_, mine);
    const auto options = at::TensorOptions().dtype(flat.scalar_type());
    const int64_t capacity = group_->slot_bytes() / static_cast<int64_t>(flat.element_size());
    at::Tensor out = output.view(-1);
    int64_t done = 0;
    do {  // a round per slot's worth of the input
      const int64_t n = std::min(capacity, flat.numel() - done);
      at::from_blob(group_->slot(rank()), {n}, options).copy_(flat.narrow(0, done, n));
      wait_for_all("reduce_scatter");  // every slot is full
      if (done == 0) check_same_collective(mine);
      const int64_t from = std::max(begin, done), to = std::min(end, done + n);
      if (to > from) {
        std::vector<at::Tensor> shares;
        for (int m = 0; m < size(); ++m)
          shares.push_back(
              at::from_blob(group_->slot(m), {n}, options).slice(0, from - done, to - done));
        at::Tensor piece = out.slice(0, from - begin, to - begin);
        reduce_in_order(op, piece, shares, /*out_is_first=*/false);
      }
      wait_for_all("reduce_scatter");  // nobody reads the slots any more
      done += n;
    } while (done < flat.numel());
    if (op == ReduceOp::kMean) divide_for_mean(output, size());
  });
  return completed_work();
}

WorkHandle SameHostCommunicator::all_gather(const at::Tensor& input, at::Tensor* output) {
  if (!group_) return inner_->all_gather(input, output);
  gather_through_slots(input, [output](const std::vector<int64_t>& shape, const at::Tensor& like) {
    *output = at::empty(shape, like.options());
    return output->view(-1);
  });
  return completed_work();
}

WorkHandle SameHostCommunicator::all_gather_into(const at::Tensor& input, at::Tensor& output) {
  if (!group_) return inner_->all_gather_into(input, output);
  DIST_CHECK_ARG(output.is_contiguous(), "all_gather_into needs a contiguous output");
  gather_through_slots(input, [&output](const std::vector<int64_t>& shape, const at::Tensor&) {
    const int64_t elements =
        std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
    DIST_CHECK_ARG(output.numel() == elements, "all_gather_into: the members' rows make ", elements,
                   " elements, but the output has ", output.numel());
    return output.view(-1);
  });
  return completed_work();
}

void SameHostCommunicator::gather_through_slots(const at::Tensor& input,
                                                const GatherOutput& make_output) {
  const at::Tensor rows = input.dim() == 0 ? input.reshape({1}) : input.contiguous();
  const at::Tensor flat = rows.reshape(-1);
  guarded("all_gather", [&] {
    // The kind and dtype must agree; the element counts may differ (they are what the members
    // learn from each other's fingerprints). `tensors` carries the row length.
    int64_t row_elements = 1;  // from the shape: an empty part's rows have a length too
    for (int64_t d = 1; d < rows.dim(); ++d) row_elements *= rows.size(d);
    const Fingerprint mine{kAllGatherKind, flat.numel(), static_cast<int64_t>(flat.scalar_type()),
                           row_elements};
    group_->publish(++sequence_, mine);
    wait_for_all("all_gather");
    std::vector<int64_t> counts;
    for (int m = 0; m < size(); ++m) {
      Fingerprint theirs = group_->fingerprint(m, sequence_);
      counts.push_back(theirs.elements);
      theirs.elements = mine.elements;
      if (!(theirs == mine)) check_same_collective(mine);  // throws, naming every member's
    }
    const auto options = at::TensorOptions().dtype(flat.scalar_type());
    const int64_t capacity = group_->slot_bytes() / static_cast<int64_t>(flat.element_size());
    std::vector<int64_t> starts{0};
    for (int64_t c : counts) starts.push_back(starts.back() + c);
    auto shape = rows.sizes().vec();
    shape[0] = row_elements == 0 ? 0 : starts.back() / row_elements;  // (0-length rows: none)
    at::Tensor all_flat = make_output(shape, rows);
    const int64_t largest = *std::max_element(counts.begin(), counts.end());
    int64_t done = 0;
    do {  // a round per slot's worth (one at least: the fingerprints are read until its end)
      const int64_t n = std::min(capacity, std::max<int64_t>(flat.numel() - done, 0));
      if (n > 0) at::from_blob(group_->slot(rank()), {n}, options).copy_(flat.narrow(0, done, n));
      wait_for_all("all_gather");  // every slot is full
      for (int m = 0; m < size(); ++m) {
        const int64_t theirs = std::min(capacity, std::max<int64_t>(counts[m] - done, 0));
        if (theirs > 0)
          all_flat.narrow(0, starts[m] + done, theirs)
              .copy_(at::from_blob(group_->slot(m), {theirs}, options));
      }
      wait_for_all("all_gather");  // nobody reads the slots any more
      done += capacity;
    } while (done < largest);
  });
}

WorkHandle SameHostCommunicator::broadcast(std::vector<at::Tensor>& tensors, int root) {
  if (!group_) return inner_->broadcast(tensors, root);
  DIST_CHECK_ARG(root >= 0 && root < size(), "broadcast root ", root, " is outside 0..",
                 size() - 1);
  guarded("broadcast", [&] {
    const Fingerprint mine = fingerprint_of(broadcast_kind(root), tensors);
    group_->publish(++sequence_, mine);
    const std::vector<at::Tensor> flat = flat_views(tensors);
    // Runs of tensors of one dtype go together (model state mixes float and integer buffers).
    bool checked = false;
    size_t first = 0;
    do {
      size_t last = first;
      while (last < flat.size() && flat[last].scalar_type() == flat[first].scalar_type()) ++last;
      const std::vector<at::Tensor> run(flat.begin() + static_cast<int64_t>(first),
                                        flat.begin() + static_cast<int64_t>(last));
      const auto options =
          at::TensorOptions().dtype(run.empty() ? at::kByte : run[0].scalar_type());
      const int64_t capacity =
          group_->slot_bytes() / (run.empty() ? 1 : static_cast<int64_t>(run[0].element_size()));
      const int64_t total = total_elements(run);
      int64_t done = 0;
      do {
        const int64_t n = std::min(capacity, total - done);
        // The root's slot: free after any earlier collective (an all_reduce's results area
        // may still be read by a member that has not reached this broadcast).
        const at::Tensor part = at::from_blob(group_->slot(root), {n}, options);
        if (rank() == root) copy_range(run, done, n, part, false);
        wait_for_all("broadcast");
        if (!checked) check_same_collective(mine);
        checked = true;
        if (rank() != root) copy_range(run, done, n, part, true);
        done += n;
        // Everyone copied: the root may write the next part, and the next collective may fill
        // the slots.
        wait_for_all("broadcast");
      } while (done < total);
      first = last;
    } while (first < flat.size());
    copy_back(flat, tensors);
  });
  return completed_work();
}

WorkHandle SameHostCommunicator::barrier() {
  if (!group_) return inner_->barrier();
  guarded("barrier", [&] {
    const Fingerprint mine{kBarrierKind, 0, 0, 0};
    group_->publish(++sequence_, mine);
    wait_for_all("barrier");
    check_same_collective(mine);
  });
  return completed_work();
}

void SameHostCommunicator::abort(const std::string& reason) {
  if (group_) group_->abort(reason);
  inner_->abort(reason);
}

}  // namespace dist::collective
