#include "collective/process_communicator.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <numeric>

#include "collective/agreement.h"
#include "collective/ring_reduce_scatter.h"
#include "dist/core/error.h"
#include "dist/core/timeline.h"

namespace dist::collective {
namespace {

// A transport's work, whose failure is diagnosed (named lost or missing member), and what to do
// once it completed.
class DiagnosedWork : public Work {
 public:
  DiagnosedWork(Liveness* liveness, std::string what, int64_t sequence, WorkHandle work,
                std::function<void()> finish)
      : liveness_(liveness),
        what_(std::move(what)),
        sequence_(sequence),
        work_(std::move(work)),
        finish_(std::move(finish)) {}

  void wait(std::chrono::milliseconds deadline) override {
    if (done_) return;
    try {
      work_->wait(deadline);
    } catch (const std::exception& e) {
      liveness_->fail(what_, sequence_, e);
    }
    if (finish_) finish_();
    done_ = true;
  }
  bool is_completed() override { return work_->is_completed(); }

 private:
  Liveness* liveness_;
  std::string what_;
  int64_t sequence_;
  WorkHandle work_;
  std::function<void()> finish_;
  bool done_ = false;
};

// A sum of a few int64 values, which its agreement can carry.
bool fits_in_agreement(const std::vector<at::Tensor>& tensors, ReduceOp op) {
  if (op != ReduceOp::kSum && op != ReduceOp::kMean) return false;
  for (const auto& t : tensors)
    if (t.scalar_type() != at::kLong) return false;
  const int64_t elements = total_elements(tensors);
  return elements > 0 && elements <= kAgreementPayload;
}

ProcessGroupSpec checked(ProcessGroupSpec spec, const std::string& transport_name) {
  DIST_CHECK_ARG(!spec.members.empty(), "a ", transport_name, " group needs at least one member");
  DIST_CHECK_ARG(spec.rank >= 0 && spec.rank < static_cast<int>(spec.members.size()),
                 transport_name, " rank ", spec.rank, " is outside 0..", spec.members.size() - 1);
  return spec;
}

}  // namespace

ProcessCommunicator::ProcessCommunicator(ProcessGroupSpec spec, const std::string& transport_name,
                                         MakeTransport make_transport, const char* backend)
    : spec_(checked(std::move(spec), transport_name)),
      rendezvous_(spec_),
      liveness_(rendezvous_),
      backend_(backend) {
  // Beating from now on (liveness_): the store's host must see a member waiting for the
  // others as alive.
  try {
    rendezvous_.join();
    agree_on_transport(transport_name);
    connect_transport(transport_name, make_transport);
  } catch (const std::exception& e) {
    // The destructor does not run for a constructor that throws: tell the others here, or a
    // member that joined after this one failed would wait for it until the rendezvous timeout.
    if (!rendezvous_.saw_peer_failure()) rendezvous_.publish_failure(e.what());
    throw;
  }
  liveness_.set_close([this] { transport_->close(); });
}

void ProcessCommunicator::connect_transport(const std::string& transport_name,
                                            const MakeTransport& make_transport) {
  try {
    transport_ = make_transport(spec_, rendezvous_);
  } catch (const StopRequested&) {
    throw;
  } catch (const std::exception& e) {
    liveness_.fail("connecting the " + transport_name + " process group", 0, e);
  }
}

// Before the transports connect: members of other backends would each wait in their own
// (Gloo for addresses in the store, MPI in mpirun's world) until a timeout, and say nothing of
// why. The backend is a setting the workers agree on, named like the others of the start-up
// check (StrategyExtended::check_workers_agree).
void ProcessCommunicator::agree_on_transport(const std::string& transport_name) {
  std::string flag_value = transport_name;  // "Gloo" is CommunicationOptions::backend "gloo"
  for (char& c : flag_value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::vector<std::string> names = rendezvous_.exchange("backend", flag_value);
  for (int r = 0; r < static_cast<int>(names.size()); ++r) {
    if (names[static_cast<size_t>(r)] == names[0]) continue;
    throw CollectiveError(detail::concat("the workers disagree before step 1: ", member_name(r),
                                         " has the collective backend ",
                                         names[static_cast<size_t>(r)], " where ", member_name(0),
                                         " has ", names[0], " (CommunicationOptions::backend)",
                                         "; start every worker with the same collective backend"));
  }
}

ProcessCommunicator::~ProcessCommunicator() {
  // Destroyed while an exception unwinds: this member is failing. Say so, unless the failure is
  // a collective's (or a peer's) that the others already see.
  if (std::uncaught_exceptions() > 0 && !rendezvous_.saw_peer_failure())
    liveness_.abort("it stopped with an error (its own output says which)");
  liveness_.stop_heartbeat();
  transport_.reset();
}

std::string ProcessCommunicator::member_name(int rank) const {
  return collective::member_name(spec_, rank);
}

int64_t ProcessCommunicator::begin(const std::string& what, const Fingerprint* fingerprint) {
  const int64_t sequence = fingerprint != nullptr ? liveness_.next_sequence() : 0;
  liveness_.check_usable(what);
  if (fingerprint == nullptr || !spec_.check_collectives) return sequence;
  std::string mismatch;
  try {
    TimelineSpan round_trip("agreement", "collective");
    mismatch = disagreement(*transport_, spec_, sequence, *fingerprint);
  } catch (const std::exception& e) {
    liveness_.fail(what, sequence, e);
  }
  if (mismatch.empty()) return sequence;
  liveness_.mark_failed();  // every member throws this; none has more to tell the others
  throw CollectiveError(mismatch);
}

WorkHandle ProcessCommunicator::issue(const std::string& what, const Fingerprint* fingerprint,
                                      const std::function<WorkHandle()>& start,
                                      std::function<void()> finish) {
  return run(what, begin(what, fingerprint), start, std::move(finish));
}

WorkHandle ProcessCommunicator::run(const std::string& what, int64_t sequence,
                                    const std::function<WorkHandle()>& start,
                                    std::function<void()> finish) {
  WorkHandle work;
  try {
    work = start();
  } catch (const std::exception& e) {
    liveness_.fail(what, sequence, e);
  }
  return std::make_shared<DiagnosedWork>(&liveness_, what, sequence, std::move(work),
                                         std::move(finish));
}

WorkHandle ProcessCommunicator::all_reduce_within_agreement(std::vector<at::Tensor>& tensors,
                                                            ReduceOp op,
                                                            const Fingerprint& fingerprint) {
  const int64_t sequence = liveness_.next_sequence();
  liveness_.check_usable("all_reduce");
  std::vector<at::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.reshape(-1));
  auto agreement = std::make_shared<Agreement>(sequence, fingerprint, at::cat(flat));
  auto finish = [this, agreement, tensors, op, sequence, n = size()]() mutable {
    std::string mismatch;
    try {
      mismatch = agreement->disagreement(*transport_, spec_);
    } catch (const std::exception& e) {
      liveness_.fail("all_reduce", sequence, e);
    }
    if (!mismatch.empty()) {
      liveness_.mark_failed();
      throw CollectiveError(mismatch);
    }
    const at::Tensor sums = agreement->payload_sum();
    int64_t offset = 0;
    for (auto& t : tensors) {
      t.copy_(sums.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
      if (op == ReduceOp::kMean) divide_for_mean(t, n);
    }
  };
  return run(
      "all_reduce", sequence, [&] { return agreement->start(*transport_); }, std::move(finish));
}

WorkHandle ProcessCommunicator::all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) {
  if (tensors.empty()) return completed_work();
  if (spec_.check_collectives && fits_in_agreement(tensors, op))
    return all_reduce_within_agreement(tensors, op, fingerprint_of(all_reduce_kind(op), tensors));
  std::function<void()> finish;
  if (op == ReduceOp::kMean) {
    finish = [tensors, n = size()]() mutable {
      for (auto& t : tensors) divide_for_mean(t, n);
    };
  }
  const Fingerprint fingerprint = fingerprint_of(all_reduce_kind(op), tensors);
  const ReduceOp moved = op == ReduceOp::kMean ? ReduceOp::kSum : op;
  return issue(
      "all_reduce", &fingerprint, [&] { return transport_->all_reduce(tensors, moved); },
      std::move(finish));
}

WorkHandle ProcessCommunicator::broadcast(std::vector<at::Tensor>& tensors, int root) {
  DIST_CHECK_ARG(root >= 0 && root < size(), "broadcast root ", root, " is outside 0..",
                 size() - 1);
  const Fingerprint fingerprint = fingerprint_of(broadcast_kind(root), tensors);
  return issue("broadcast", &fingerprint, [&] { return transport_->broadcast(tensors, root); });
}

std::vector<int64_t> ProcessCommunicator::gather_sizes(const at::Tensor& local) {
  std::vector<at::Tensor> sizes(static_cast<size_t>(size()));
  for (auto& s : sizes) s = at::empty({1}, at::kLong);
  const Fingerprint sizes_fingerprint{kAllGatherSizesKind, 1, static_cast<int64_t>(at::kLong), 1};
  issue("all_gather (sizes)", &sizes_fingerprint, [&] {
    return transport_->all_gather(at::tensor({local.size(0)}, at::kLong), &sizes);
  })->wait();
  std::vector<int64_t> counts;
  for (const auto& s : sizes) counts.push_back(s.item<int64_t>());
  return counts;
}

WorkHandle ProcessCommunicator::all_gather_into(const at::Tensor& input, at::Tensor& output) {
  // A ring of send/recv straight into the output's rows (ring_reduce_scatter.h), after the
  // sizes: no part is buffered, where the transport's all-gather would buffer all of them.
  const at::Tensor local = input.dim() == 0 ? input.reshape({1}) : input.contiguous();
  const std::vector<int64_t> counts = gather_sizes(local);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const int64_t row = local.size(0) == 0 ? 1 : local.numel() / local.size(0);
  DIST_CHECK_ARG(output.is_contiguous() && output.numel() == total * row,
                 "all_gather_into: the members' ", total, " rows of ", row,
                 " elements do not fit an output of ", output.numel(), " (contiguous)");
  auto shape = local.sizes().vec();
  shape[0] = total;
  at::Tensor rows = output.view(shape);
  const int64_t first = std::accumulate(counts.begin(), counts.begin() + rank(), int64_t{0});
  at::Tensor mine = rows.narrow(0, first, local.size(0));
  if (mine.data_ptr() != local.data_ptr()) mine.copy_(local);
  const Fingerprint fingerprint{kAllGatherKind, total * row,
                                static_cast<int64_t>(local.scalar_type()), 1};
  const int64_t sequence = begin("all_gather", &fingerprint);
  return run("all_gather", sequence, [&] {
    all_gather_by_ring(*transport_, rank(), size(), rows, counts, ring_tag(sequence));
    return completed_work();
  });
}

WorkHandle ProcessCommunicator::all_gather(const at::Tensor& input, at::Tensor* output) {
  // Transports gather equal shapes: exchange the sizes along dim 0 first, pad to the largest,
  // gather, then cut each member's part back to its size.
  const at::Tensor local = input.dim() == 0 ? input.reshape({1}) : input.contiguous();
  const std::vector<int64_t> counts = gather_sizes(local);
  const int64_t largest = *std::max_element(counts.begin(), counts.end());
  auto padded_shape = local.sizes().vec();
  padded_shape[0] = largest;
  at::Tensor padded = at::zeros(padded_shape, local.options());
  padded.narrow(0, 0, local.size(0)).copy_(local);
  auto parts = std::make_shared<std::vector<at::Tensor>>();
  for (int r = 0; r < size(); ++r) parts->push_back(at::empty_like(padded));
  const Fingerprint fingerprint{kAllGatherKind, padded.numel(),
                                static_cast<int64_t>(padded.scalar_type()), 1};
  return issue(
      "all_gather", &fingerprint, [&] { return transport_->all_gather(padded, parts.get()); },
      [parts, counts, output] {
        std::vector<at::Tensor> cut;
        for (size_t r = 0; r < counts.size(); ++r)
          cut.push_back((*parts)[r].narrow(0, 0, counts[r]));
        *output = at::cat(cut, 0);
      });
}

WorkHandle ProcessCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                               ReduceOp op) {
  const int64_t rows = input.dim() == 0 ? 1 : input.size(0);
  const auto [first, end] = chunk_range(rows, size(), rank());
  const int64_t row_elements = rows == 0 ? 0 : input.numel() / rows;
  DIST_CHECK_ARG(output.numel() == (end - first) * row_elements, "reduce_scatter on ",
                 member_name(rank()), ": the output has ", output.numel(),
                 " elements, but this member's chunk has ", end - first, " of the ", rows,
                 " rows of ", row_elements, " elements");
  const Fingerprint fingerprint{reduce_scatter_kind(op), input.numel(),
                                static_cast<int64_t>(input.scalar_type()), rows};
  std::function<void()> finish;
  if (op == ReduceOp::kMean)
    finish = [output, n = size()]() mutable { divide_for_mean(output, n); };
  const ReduceOp moved = op == ReduceOp::kMean ? ReduceOp::kSum : op;
  const int64_t sequence = begin("reduce_scatter", &fingerprint);
  return run(
      "reduce_scatter", sequence,
      [&] {
        if (WorkHandle native = transport_->reduce_scatter(input, output, moved)) return native;
        reduce_scatter_by_ring(*transport_, rank(), size(), input, output, moved,
                               ring_tag(sequence));
        return completed_work();
      },
      std::move(finish));
}

WorkHandle ProcessCommunicator::barrier() {
  const Fingerprint fingerprint{kBarrierKind, 0, 0, 0};
  return issue("barrier", &fingerprint, [&] { return transport_->barrier(); });
}

WorkHandle ProcessCommunicator::send(const at::Tensor& tensor, int to, int tag) {
  check_peer("send", member_name(rank()), rank(), to, size());
  DIST_CHECK_ARG(tag >= 0 && tag < kFirstReservedTag, "send on ", member_name(rank()), ": tag ",
                 tag, " is outside 0..", kFirstReservedTag - 1, " (the rest are the library's)");
  return issue("send to " + member_name(to), nullptr,
               [&] { return transport_->send(tensor.contiguous(), to, tag); });
}

WorkHandle ProcessCommunicator::recv(at::Tensor& tensor, int from, int tag) {
  check_peer("recv", member_name(rank()), rank(), from, size());
  DIST_CHECK_ARG(tag >= 0 && tag < kFirstReservedTag, "recv on ", member_name(rank()), ": tag ",
                 tag, " is outside 0..", kFirstReservedTag - 1, " (the rest are the library's)");
  DIST_CHECK_ARG(tensor.is_contiguous(), "recv needs a contiguous tensor");
  return issue("recv from " + member_name(from), nullptr,
               [&] { return transport_->recv(tensor, from, tag); });
}

std::vector<std::string> ProcessCommunicator::exchange(const std::string& key,
                                                       const std::string& value) {
  return rendezvous_.exchange(key, value);
}

void ProcessCommunicator::abort(const std::string& reason) {
  if (rendezvous_.saw_peer_failure()) return;  // the peers know: they failed first
  liveness_.abort(reason);
}

}  // namespace dist::collective
