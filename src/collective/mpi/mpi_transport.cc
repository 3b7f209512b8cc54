#include "collective/mpi/mpi_transport.h"

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "collective/mpi/mpi_runtime.h"
#include "collective/mpi/progress_thread.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kNoticeTag = 1;

// What the transport and its works share: the communicators, and whether this member closed its
// transport or a peer sent its closing notice.
class Channel {
 public:
  Channel(MPI_Comm data, MPI_Comm notices, std::chrono::milliseconds timeout)
      : data_(data), notices_(notices), timeout_(timeout) {
    mpi::check(
        MPI_Irecv(&notice_, 1, MPI_INT, MPI_ANY_SOURCE, kNoticeTag, notices_, &notice_request_),
        "MPI_Irecv");
  }

  MPI_Comm data() const { return data_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Throws once this transport closed or a peer's notice came.
  void check_open() {
    if (closed_) throw std::runtime_error("this member's MPI transport was closed after a failure");
    std::lock_guard<std::mutex> lock(notice_mutex_);
    if (closed_peer_ < 0 && notice_request_ != MPI_REQUEST_NULL) {
      int arrived = 0;
      MPI_Status status;
      mpi::check(MPI_Test(&notice_request_, &arrived, &status), "MPI_Test");
      if (arrived) closed_peer_ = status.MPI_SOURCE;
    }
    if (closed_peer_ >= 0)
      throw std::runtime_error("MPI rank " + std::to_string(closed_peer_) +
                               " closed its transport after a failure");
  }

  // Tells every peer that this member failed, giving the notices a moment to leave (MPI moves
  // data only inside its calls); operations still in flight are abandoned, so MPI is not
  // finalized at exit.
  void close(int rank, int size) {
    if (closed_.exchange(true)) return;
    mpi::mark_failed();
    std::vector<MPI_Request> sent;
    static const int kClosing = 1;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      sent.emplace_back();
      if (MPI_Isend(&kClosing, 1, MPI_INT, peer, kNoticeTag, notices_, &sent.back()) != MPI_SUCCESS)
        sent.pop_back();
    }
    const auto until = Clock::now() + std::chrono::milliseconds(300);
    int all_sent = 0;
    while (!all_sent && Clock::now() < until) {
      MPI_Testall(static_cast<int>(sent.size()), sent.data(), &all_sent, MPI_STATUSES_IGNORE);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    for (auto& request : sent)
      if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
  }

  // A transport that did not close: nothing is in flight, so its resources can go (unless MPI
  // was finalized already: a communicator destroyed at exit).
  void release() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (closed_ || finalized) return;
    if (notice_request_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&notice_request_);
      MPI_Wait(&notice_request_, MPI_STATUS_IGNORE);
    }
    MPI_Comm_free(&notices_);
    MPI_Comm_free(&data_);
  }

 private:
  MPI_Comm data_;
  MPI_Comm notices_;
  std::chrono::milliseconds timeout_;
  std::atomic<bool> closed_{false};
  std::mutex notice_mutex_;
  int notice_ = 0;
  MPI_Request notice_request_ = MPI_REQUEST_NULL;
  int closed_peer_ = -1;
};

// One operation's MPI requests, the tensors MPI reads or writes until they complete, and what to
// do once they did (copy a staged or gathered result into place).
class MpiWork : public Work, public Progressing {
 public:
  MpiWork(std::shared_ptr<Channel> channel, std::vector<MPI_Request> requests,
          std::vector<at::Tensor> held, std::function<void()> finish)
      : channel_(std::move(channel)),
        requests_(std::move(requests)),
        held_(std::move(held)),
        finish_(std::move(finish)) {}

  void wait(std::chrono::milliseconds deadline) override {
    const auto limit = Clock::now() + (deadline.count() >= 0 ? deadline : channel_->timeout());
    for (int polls = 0; !test(); ++polls) {
      // MPI makes progress only inside its calls: test often at first, then back off.
      if (polls % 64 == 0) channel_->check_open();
      if (Clock::now() >= limit)
        throw std::runtime_error(
            "MPI: the operation did not complete within " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                               deadline.count() >= 0 ? deadline : channel_->timeout())
                               .count()) +
            " ms");
      // Spinning longer takes the core from the replicas' compute on a busy host.
      if (polls < 100)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  bool is_completed() override { return test(); }

  // From the progress thread: MPI moves the requests; finish_ is left to test().
  bool advance() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_ || requests_done_) return true;
    int completed = 0;
    // A failure is the waiter's to report: its own test meets it again.
    if (MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &completed,
                    MPI_STATUSES_IGNORE) != MPI_SUCCESS)
      return true;
    requests_done_ = completed != 0;
    return requests_done_;
  }

  // Dropped before it completed (it failed): MPI may still write into its tensors or read its
  // counts until the process ends, so they are kept until then.
  ~MpiWork() override {
    if (done_) return;
    static std::mutex mutex;
    static auto* abandoned =
        new std::vector<std::pair<std::vector<at::Tensor>, std::function<void()>>>;
    std::lock_guard<std::mutex> lock(mutex);
    abandoned->emplace_back(std::move(held_), std::move(finish_));
  }

 private:
  bool test() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return true;
    if (!requests_done_) {
      int completed = 0;
      mpi::check(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &completed,
                             MPI_STATUSES_IGNORE),
                 "MPI_Testall");
      if (!completed) return false;
    }
    if (finish_) finish_();
    held_.clear();
    done_ = true;
    return true;
  }

  std::shared_ptr<Channel> channel_;
  std::mutex mutex_;
  std::vector<MPI_Request> requests_;
  std::vector<at::Tensor> held_;
  std::function<void()> finish_;
  bool requests_done_ = false;  // MPI completed them (the progress thread may see it first)
  bool done_ = false;
};

bool reduced_as_float(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

int byte_count(const at::Tensor& t, const char* what) {
  DIST_CHECK_ARG(t.is_contiguous(), "the MPI collective backend's ", what,
                 " needs contiguous tensors");
  return mpi::count_of(static_cast<int64_t>(t.nbytes()), what);
}

class MpiTransport : public Transport {
 public:
  explicit MpiTransport(const ProcessGroupSpec& spec);
  ~MpiTransport() override {
    progress_.stop();
    channel_->release();
  }

  WorkHandle all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) override;
  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root) override;
  WorkHandle all_gather(const at::Tensor& input, std::vector<at::Tensor>* outputs) override;
  WorkHandle barrier() override;
  WorkHandle send(const at::Tensor& tensor, int to, int tag) override;
  WorkHandle recv(at::Tensor& tensor, int from, int tag) override;
  WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override;
  void close() override {
    progress_.stop();
    channel_->close(rank_, size_);
  }

 private:
  WorkHandle work(std::vector<MPI_Request> requests, std::vector<at::Tensor> held,
                  std::function<void()> finish = nullptr) {
    auto work = std::make_shared<MpiWork>(channel_, std::move(requests), std::move(held),
                                          std::move(finish));
    progress_.watch(work);
    return work;
  }
  int tag_ub_ = 0;
  int rank_ = 0;
  int size_ = 0;
  std::shared_ptr<Channel> channel_;
  ProgressThread progress_;  // moves this transport's operations while nobody waits
};

MpiTransport::MpiTransport(const ProcessGroupSpec& spec)
    : rank_(spec.rank), size_(static_cast<int>(spec.members.size())) {
  mpi::initialize_once();
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  DIST_CHECK_ARG(world == size_, "the MPI collective backend runs one MPI process per worker, but ",
                 "this job's MPI world has ", world, " processes for its ", size_,
                 " workers: start it with mpirun -np ", size_);
  // Ordered by the cluster's rank, whatever MPI's numbering (a collective of the whole world).
  MPI_Comm data = MPI_COMM_NULL, notices = MPI_COMM_NULL;
  mpi::check(MPI_Comm_split(MPI_COMM_WORLD, 0, spec.rank, &data), "MPI_Comm_split");
  MPI_Comm_set_errhandler(data, MPI_ERRORS_RETURN);
  int rank = -1;
  MPI_Comm_rank(data, &rank);
  DIST_CHECK_ARG(rank == spec.rank, "MPI: ", member_name(spec, spec.rank), " got MPI rank ", rank,
                 ": two processes of the job claim the same worker index");
  mpi::check(MPI_Comm_dup(data, &notices), "MPI_Comm_dup");
  int* tag_ub = nullptr;
  int has_tag_ub = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &has_tag_ub);
  tag_ub_ = has_tag_ub ? *tag_ub : 32767;  // the least MPI promises
  channel_ = std::make_shared<Channel>(data, notices, spec.collective_timeout);
}

WorkHandle MpiTransport::all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) {
  std::vector<MPI_Request> requests;
  std::vector<at::Tensor> held;
  std::vector<std::pair<at::Tensor, at::Tensor>> staged;  // (tensor, its float copy)
  for (auto& t : tensors) {
    if (t.numel() == 0) continue;  // every member skips it: shapes agree
    at::Tensor moved = t;
    // MPI has no 16-bit floats: reduced as float, rounded once at the end.
    if (reduced_as_float(t)) staged.emplace_back(t, moved = t.to(at::kFloat));
    DIST_CHECK_ARG(moved.is_contiguous(),
                   "the MPI collective backend's all_reduce needs "
                   "contiguous tensors");
    requests.emplace_back();
    mpi::check(
        MPI_Iallreduce(MPI_IN_PLACE, moved.data_ptr(), mpi::count_of(moved.numel(), "all_reduce"),
                       mpi::reducible_type(moved.scalar_type()), mpi::op_of(op), channel_->data(),
                       &requests.back()),
        "MPI_Iallreduce");
    held.push_back(moved);
  }
  std::function<void()> finish;
  if (!staged.empty())
    finish = [staged] {
      for (const auto& [tensor, copy] : staged) tensor.copy_(copy);
    };
  return work(std::move(requests), std::move(held), std::move(finish));
}

WorkHandle MpiTransport::broadcast(std::vector<at::Tensor>& tensors, int root) {
  std::vector<MPI_Request> requests;
  for (auto& t : tensors) {
    if (t.numel() == 0) continue;
    requests.emplace_back();
    mpi::check(MPI_Ibcast(t.data_ptr(), byte_count(t, "broadcast"), MPI_BYTE, root,
                          channel_->data(), &requests.back()),
               "MPI_Ibcast");
  }
  return work(std::move(requests), tensors);
}

WorkHandle MpiTransport::all_gather(const at::Tensor& input, std::vector<at::Tensor>* outputs) {
  if (input.numel() == 0) return completed_work();
  const int bytes = byte_count(input, "all_gather");
  at::Tensor gathered = at::empty({size_, input.numel()}, input.options());
  std::vector<MPI_Request> requests(1);
  mpi::check(MPI_Iallgather(input.data_ptr(), bytes, MPI_BYTE, gathered.data_ptr(), bytes, MPI_BYTE,
                            channel_->data(), &requests[0]),
             "MPI_Iallgather");
  return work(std::move(requests), {input, gathered}, [gathered, into = *outputs] {
    for (size_t r = 0; r < into.size(); ++r)
      into[r].view(-1).copy_(gathered[static_cast<int64_t>(r)]);
  });
}

WorkHandle MpiTransport::barrier() {
  std::vector<MPI_Request> requests(1);
  mpi::check(MPI_Ibarrier(channel_->data(), &requests[0]), "MPI_Ibarrier");
  return work(std::move(requests), {});
}

WorkHandle MpiTransport::send(const at::Tensor& tensor, int to, int tag) {
  DIST_CHECK_ARG(tag <= tag_ub_, "MPI: tag ", tag, " is above this MPI's largest, ", tag_ub_);
  std::vector<MPI_Request> requests(1);
  mpi::check(MPI_Isend(tensor.data_ptr(), byte_count(tensor, "send"), MPI_BYTE, to, tag,
                       channel_->data(), &requests[0]),
             "MPI_Isend");
  return work(std::move(requests), {tensor});
}

WorkHandle MpiTransport::recv(at::Tensor& tensor, int from, int tag) {
  DIST_CHECK_ARG(tag <= tag_ub_, "MPI: tag ", tag, " is above this MPI's largest, ", tag_ub_);
  std::vector<MPI_Request> requests(1);
  mpi::check(MPI_Irecv(tensor.data_ptr(), byte_count(tensor, "recv"), MPI_BYTE, from, tag,
                       channel_->data(), &requests[0]),
             "MPI_Irecv");
  return work(std::move(requests), {tensor});
}

WorkHandle MpiTransport::reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
  const int64_t rows = input.dim() == 0 ? 1 : input.size(0);
  if (rows == 0) return completed_work();
  const int64_t row_elements = input.numel() / rows;
  // Counts per member, read by MPI until the operation completes: kept with the work.
  auto counts = std::make_shared<std::vector<int>>();
  for (int r = 0; r < size_; ++r) {
    const auto [begin, end] = chunk_range(rows, size_, r);
    counts->push_back(mpi::count_of((end - begin) * row_elements, "reduce_scatter"));
  }
  const bool staged = reduced_as_float(input);
  const at::Tensor in = staged ? input.to(at::kFloat) : input.contiguous();
  at::Tensor out = staged ? at::empty(output.sizes(), in.options()) : output;
  DIST_CHECK_ARG(out.is_contiguous(),
                 "the MPI collective backend's reduce_scatter needs a "
                 "contiguous output");
  std::vector<MPI_Request> requests(1);
  mpi::check(MPI_Ireduce_scatter(in.data_ptr(), out.data_ptr(), counts->data(),
                                 mpi::reducible_type(in.scalar_type()), mpi::op_of(op),
                                 channel_->data(), &requests[0]),
             "MPI_Ireduce_scatter");
  return work(std::move(requests), {in, out}, [counts, staged, out, output]() mutable {
    if (staged) output.copy_(out);
  });
}

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(const ProcessGroupSpec& spec, Rendezvous&) {
  return std::make_unique<MpiTransport>(spec);
}

}  // namespace dist::collective
