// The bf16 and fp16 hooks (gradient_compression.h): each process sends the chunk of the pack
// that process q owns, compressed, to q; q adds the chunks it got in float32 in process order,
// compresses the sum and sends it to everyone. Two exchanges of point-to-point messages
// instead of an all-reduce, so that the sum's order is defined and the same for any number of
// processes (a ring all-reduce in 16 bits would round at every hop, in an order that depends
// on the chunk), at the ring's traffic: 2(N-1)/N of the pack in 16 bits.
#include <ATen/ATen.h>

#include <deque>
#include <map>
#include <mutex>

#include "collective/communicator.h"
#include "dist/distribute/gradient_compression.h"
#include "distribute/reduction/half_codec.h"

namespace dist {
namespace {

using compression::HalfKind;

// Tags of this hook's messages (below the library's reserved ones): the contributions go
// first, during backward; the sums after backward. Apart, so neither is taken for the other.
constexpr int kContributionTag = (1 << 29) + 1;
constexpr int kSumTag = (1 << 29) + 2;

// One pack's reduction between its two exchanges.
struct Exchange {
  ProcessCollectives* processes = nullptr;  // alive until the pack's work is waited for
  at::Tensor buffer;
  int rank = 0;
  int size = 1;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // per process: its chunk of buffer
  std::vector<at::Tensor> contributions;            // per process: its chunk for this one
  std::vector<at::Tensor> outgoing;                 // this one's chunks for the others
  std::vector<PendingWork> first;                   // the contributions' sends and recvs
  at::Tensor shared;                                // this one's chunk of the sum, encoded
  std::vector<at::Tensor> sums;                     // per process: its chunk of the sum
  std::vector<PendingWork> second;                  // the sums' sends and recvs

  at::Tensor chunk(int process) const {
    const auto [begin, end] = ranges[static_cast<size_t>(process)];
    return buffer.narrow(0, begin, end - begin);
  }
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
    exchange->contributions.resize(static_cast<size_t>(exchange->size));
    exchange->sums.resize(static_cast<size_t>(exchange->size));
    send_contributions(*exchange);
    {
      std::lock_guard<std::mutex> lock(mu_);
      not_shared_[&processes].push_back(exchange);
    }
    return PendingWork([this, exchange] {
      share_every_sum(exchange->processes);
      take_sums(*exchange);
    });
  }

 private:
  void send_contributions(Exchange& exchange) const {
    const int me = exchange.rank;
    const int64_t mine = exchange.chunk(me).numel();
    for (int q = 0; q < exchange.size; ++q) {
      if (q == me) continue;
      exchange.outgoing.push_back(compression::encode(exchange.chunk(q), kind_));
      exchange.first.push_back(
          exchange.processes->send(exchange.outgoing.back(), q, kContributionTag));
    }
    for (int q = 0; q < exchange.size; ++q) {
      auto& in = exchange.contributions[static_cast<size_t>(q)];
      if (q == me) {
        in = compression::encode(exchange.chunk(me), kind_);
        continue;
      }
      in = at::empty({compression::encoded_bytes(mine)}, at::kByte);
      exchange.first.push_back(exchange.processes->recv(in, q, kContributionTag));
    }
  }

  // The first wait of a step sends every pack's sum at once, in pack order (so every process
  // pairs the same messages), instead of each pack's when its turn comes: the later packs'
  // sums then cross while the strategy steps the earlier ones' parameters.
  void share_every_sum(ProcessCollectives* processes) {
    std::deque<std::shared_ptr<Exchange>> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready.swap(not_shared_[processes]);
    }
    for (auto& exchange : ready) share_sum(*exchange);
  }

  void share_sum(Exchange& exchange) const {
    for (auto& work : exchange.first) work.wait();
    const int me = exchange.rank;
    at::Tensor sum = at::empty_like(exchange.chunk(me));
    compression::decode(exchange.contributions[0], kind_, sum);
    for (size_t p = 1; p < exchange.contributions.size(); ++p)
      compression::decode_add(exchange.contributions[p], kind_, sum);
    exchange.shared = compression::encode(sum, kind_);
    for (int q = 0; q < exchange.size; ++q)
      if (q != me) exchange.second.push_back(exchange.processes->send(exchange.shared, q, kSumTag));
    for (int q = 0; q < exchange.size; ++q) {
      if (q == me) continue;
      auto& in = exchange.sums[static_cast<size_t>(q)];
      in = at::empty({compression::encoded_bytes(exchange.chunk(q).numel())}, at::kByte);
      exchange.second.push_back(exchange.processes->recv(in, q, kSumTag));
    }
  }

  void take_sums(Exchange& exchange) const {
    at::Tensor mine = exchange.chunk(exchange.rank);
    compression::decode(exchange.shared, kind_, mine);
    for (auto& work : exchange.second) work.wait();
    for (int q = 0; q < exchange.size; ++q) {
      if (q == exchange.rank) continue;
      at::Tensor chunk = exchange.chunk(q);
      compression::decode(exchange.sums[static_cast<size_t>(q)], kind_, chunk);
    }
  }

  std::mutex mu_;
  // Per processes crossed: the packs whose sums are not sent yet, in pack order.
  std::map<ProcessCollectives*, std::deque<std::shared_ptr<Exchange>>> not_shared_;
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
