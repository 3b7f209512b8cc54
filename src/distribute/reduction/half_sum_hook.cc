// The bf16 and fp16 hooks (gradient_compression.h): each process sends the chunk of the pack
// that process q owns, compressed, to q; q adds the chunks it got in float32 in process order,
// compresses the sum and sends it to everyone. Two exchanges of point-to-point messages
// instead of an all-reduce, so that the sum's order is defined and the same for any number of
// processes (a ring all-reduce in 16 bits would round at every hop, in an order that depends
// on the chunk), at the ring's traffic: 2(N-1)/N of the pack in 16 bits.
//
// When: a pack's contributions leave as backward completes it (reduce()); a thread per
// processes crossed then takes the packs in pack order, waits for each one's contributions
// and sends its sum at once, so that every process pairs the same messages and a pack's sum
// crosses while backward still makes the later packs (as DDP's ring runs as soon as a bucket
// is ready). Messages go in pieces, each send beside its receive (see cross_messages()). The
// buffers of each pack are kept from step to step.
#include <ATen/ATen.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "collective/communicator.h"
#include "collective/ring_reduce_scatter.h"
#include "dist/distribute/gradient_compression.h"
#include "distribute/reduction/half_codec.h"

namespace dist {
namespace {

using compression::HalfKind;

// Tags of this hook's messages (below the library's reserved ones): the contributions and the
// sums apart, so neither is taken for the other.
constexpr int kContributionTag = (1 << 29) + 1;
constexpr int kSumTag = (1 << 29) + 2;

// One pack's encoded messages, kept from step to step (the same sizes every step).
struct PackBuffers {
  std::vector<at::Tensor> outgoing;       // per process: this one's chunk for it
  std::vector<at::Tensor> contributions;  // per process: its chunk for this one
  at::Tensor sum;                         // this one's chunk of the sum, float
  at::Tensor shared;                      // the same, encoded
  std::vector<at::Tensor> sums;           // per process: its chunk of the sum
};

// One pack's reduction in one step.
struct Exchange {
  ProcessCollectives* processes = nullptr;  // alive until the pack's work is waited for
  std::shared_ptr<PackBuffers> buffers;
  at::Tensor buffer;
  int rank = 0;
  int size = 1;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // per process: its chunk of buffer
  std::vector<PendingWork> first;                   // the contributions' sends and recvs
  std::vector<PendingWork> second;                  // the sums' sends and recvs
  // Set by the sharer once the sum went out (or failed to).
  bool shared = false;
  std::exception_ptr failure;

  at::Tensor chunk(int process) const {
    const auto [begin, end] = ranges[static_cast<size_t>(process)];
    return buffer.narrow(0, begin, end - begin);
  }
};

// Sends out[q] to and receives in[q] from every other process q, piece by piece, each piece's
// send issued beside its receive; the works join `works`.
void cross_messages(ProcessCollectives& processes, const std::vector<at::Tensor>& out,
                    std::vector<at::Tensor>& in, int tag, std::vector<PendingWork>& works) {
  const int me = processes.rank();
  int64_t longest = 0;
  for (int q = 0; q < processes.size(); ++q)
    if (q != me) longest = std::max({longest, out[q].numel(), in[q].numel()});
  for (int64_t first = 0; first < longest; first += collective::kMessagePieceBytes) {
    for (int q = 0; q < processes.size(); ++q) {
      if (q == me) continue;
      const auto piece = [first](const at::Tensor& bytes) {
        return bytes.narrow(0, first,
                            std::min(collective::kMessagePieceBytes, bytes.numel() - first));
      };
      if (first < out[q].numel()) works.push_back(processes.send(piece(out[q]), q, tag));
      if (first < in[q].numel()) {
        at::Tensor into = piece(in[q]);
        works.push_back(processes.recv(into, q, tag));
      }
    }
  }
}

at::Tensor bytes_for(at::Tensor& kept, int64_t values) {
  const int64_t bytes = compression::encoded_bytes(values);
  if (!kept.defined() || kept.numel() != bytes) kept = at::empty({bytes}, at::kByte);
  return kept;
}

// A thread that sends the packs' sums of one processes crossed, in pack order, each as soon
// as its contributions are in.
class SumSharer {
 public:
  explicit SumSharer(HalfKind kind) : kind_(kind), thread_([this] { run(); }) {}
  ~SumSharer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    queued_.notify_all();
    thread_.join();
  }
  void add(std::shared_ptr<Exchange> exchange) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(exchange));
    }
    queued_.notify_all();
  }
  // Until `exchange`'s sum went out; rethrows what stopped it.
  void wait_shared(const Exchange& exchange) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return exchange.shared; });
    if (exchange.failure) std::rethrow_exception(exchange.failure);
  }

 private:
  void run() {
    for (;;) {
      std::shared_ptr<Exchange> next;
      {
        std::unique_lock<std::mutex> lock(mu_);
        queued_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr failure;
      try {
        share_sum(*next);
      } catch (...) {
        failure = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        next->failure = failure;
        next->shared = true;
      }
      done_.notify_all();
    }
  }

  void share_sum(Exchange& exchange) const {
    for (auto& work : exchange.first) work.wait();
    PackBuffers& kept = *exchange.buffers;
    const int me = exchange.rank;
    const int64_t mine = exchange.chunk(me).numel();
    if (!kept.sum.defined() || kept.sum.numel() != mine) kept.sum = at::empty({mine});
    compression::decode(kept.contributions[0], kind_, kept.sum);
    for (size_t p = 1; p < kept.contributions.size(); ++p)
      compression::decode_add(kept.contributions[p], kind_, kept.sum);
    compression::encode_into(kept.sum, kind_, bytes_for(kept.shared, mine));
    const std::vector<at::Tensor> out(static_cast<size_t>(exchange.size), kept.shared);
    for (int q = 0; q < exchange.size; ++q)
      if (q != me) bytes_for(kept.sums[static_cast<size_t>(q)], exchange.chunk(q).numel());
    cross_messages(*exchange.processes, out, kept.sums, kSumTag, exchange.second);
  }

  HalfKind kind_;
  std::mutex mu_;
  std::condition_variable queued_, done_;
  std::deque<std::shared_ptr<Exchange>> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the rest is made
};

class HalfSumHook : public CommunicationHook {
 public:
  explicit HalfSumHook(HalfKind kind) : kind_(kind) {}
  std::string name() const override { return kind_ == HalfKind::kBFloat16 ? "bf16" : "fp16"; }

  PendingWork reduce(ProcessCollectives& processes, GradientPack& pack) override {
    auto exchange = std::make_shared<Exchange>();
    exchange->processes = &processes;
    exchange->buffer = pack.buffer;
    exchange->rank = processes.rank();
    exchange->size = processes.size();
    for (int p = 0; p < exchange->size; ++p)
      exchange->ranges.push_back(collective::chunk_range(pack.buffer.numel(), exchange->size, p));
    SumSharer* sharer = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& kept = buffers_[{&processes, pack.model, pack.index}];
      if (!kept) kept = std::make_shared<PackBuffers>();
      exchange->buffers = kept;
      auto& slot = sharers_[&processes];
      if (!slot) slot = std::make_unique<SumSharer>(kind_);
      sharer = slot.get();
    }
    send_contributions(*exchange);
    sharer->add(exchange);
    return PendingWork([sharer, exchange, kind = kind_] {
      sharer->wait_shared(*exchange);
      take_sums(*exchange, kind);
    });
  }

 private:
  void send_contributions(Exchange& exchange) const {
    PackBuffers& kept = *exchange.buffers;
    const auto count = static_cast<size_t>(exchange.size);
    kept.outgoing.resize(count);
    kept.contributions.resize(count);
    kept.sums.resize(count);
    const int me = exchange.rank;
    const int64_t mine = exchange.chunk(me).numel();
    for (int q = 0; q < exchange.size; ++q) {
      auto& out = kept.outgoing[static_cast<size_t>(q)];
      auto& in = kept.contributions[static_cast<size_t>(q)];
      if (q == me) {
        compression::encode_into(exchange.chunk(me), kind_, bytes_for(in, mine));
        continue;
      }
      compression::encode_into(exchange.chunk(q), kind_, bytes_for(out, exchange.chunk(q).numel()));
      bytes_for(in, mine);
    }
    cross_messages(*exchange.processes, kept.outgoing, kept.contributions, kContributionTag,
                   exchange.first);
  }

  static void take_sums(Exchange& exchange, HalfKind kind) {
    PackBuffers& kept = *exchange.buffers;
    at::Tensor mine = exchange.chunk(exchange.rank);
    compression::decode(kept.shared, kind, mine);
    for (auto& work : exchange.second) work.wait();
    for (int q = 0; q < exchange.size; ++q) {
      if (q == exchange.rank) continue;
      at::Tensor chunk = exchange.chunk(q);
      compression::decode(kept.sums[static_cast<size_t>(q)], kind, chunk);
    }
  }

  std::mutex mu_;
  // Per (processes crossed, model, pack): the pack's buffers, reused every step (a pack's
  // exchange is waited for before the next step reduces the pack again).
  std::map<std::tuple<ProcessCollectives*, int, size_t>, std::shared_ptr<PackBuffers>> buffers_;
  // Per processes crossed: the thread that sends its packs' sums, in pack order.
  std::map<ProcessCollectives*, std::unique_ptr<SumSharer>> sharers_;
  HalfKind kind_;
};

}  // namespace

std::shared_ptr<CommunicationHook> bf16_compression() {
  return std::make_shared<HalfSumHook>(HalfKind::kBFloat16);
}

std::shared_ptr<CommunicationHook> fp16_compression() {
  return std::make_shared<HalfSumHook>(HalfKind::kFloat16);
}

}  // namespace dist
