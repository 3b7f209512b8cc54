#include "collective/communicator.h"

#include <ATen/ATen.h>

#include "dist/core/error.h"

namespace dist::collective {
namespace {

class CompletedWork : public Work {
 public:
  void wait(std::chrono::milliseconds) override {}
  bool is_completed() override { return true; }
};

// Waits for the all_reduce, then copies this member's chunk out.
class ChunkOfAllReduce : public Work {
 public:
  ChunkOfAllReduce(WorkHandle all_reduce, at::Tensor all, at::Tensor output, int64_t begin,
                   int64_t end)
      : all_reduce_(std::move(all_reduce)),
        all_(std::move(all)),
        output_(std::move(output)),
        begin_(begin),
        end_(end) {}
  void wait(std::chrono::milliseconds deadline) override {
    all_reduce_->wait(deadline);
    output_.copy_(all_.slice(0, begin_, end_));
  }
  bool is_completed() override { return all_reduce_->is_completed(); }

 private:
  WorkHandle all_reduce_;
  at::Tensor all_, output_;
  int64_t begin_, end_;
};

}  // namespace

namespace {

// all_gather's result copied into a given tensor once it is complete.
class GatheredInto : public Work {
 public:
  GatheredInto(WorkHandle gather, std::shared_ptr<at::Tensor> all, at::Tensor output)
      : gather_(std::move(gather)), all_(std::move(all)), output_(std::move(output)) {}
  void wait(std::chrono::milliseconds deadline) override {
    gather_->wait(deadline);
    if (!all_) return;
    DIST_CHECK_ARG(all_->numel() == output_.numel(), "all_gather_into: the members' rows make ",
                   all_->numel(), " elements, but the output has ", output_.numel());
    output_.view(-1).copy_(all_->view(-1));
    all_.reset();
  }
  bool is_completed() override { return !all_; }

 private:
  WorkHandle gather_;
  std::shared_ptr<at::Tensor> all_;
  at::Tensor output_;
};

}  // namespace

WorkHandle Communicator::all_gather_into(const at::Tensor& input, at::Tensor& output) {
  auto all = std::make_shared<at::Tensor>();
  WorkHandle gather = all_gather(input, all.get());
  return std::make_shared<GatheredInto>(std::move(gather), std::move(all), output);
}

WorkHandle reduce_scatter_by_all_reduce(Communicator& communicator, const at::Tensor& input,
                                        at::Tensor& output, ReduceOp op) {
  std::vector<at::Tensor> all{input.contiguous().clone()};
  auto work = communicator.all_reduce(all, op);
  const auto [begin, end] =
      chunk_range(input.dim() == 0 ? 1 : input.size(0), communicator.size(), communicator.rank());
  return std::make_shared<ChunkOfAllReduce>(std::move(work), all[0], output, begin, end);
}

void check_peer(const char* what, const std::string& self_name, int self, int peer, int size) {
  DIST_CHECK_ARG(peer >= 0 && peer < size && peer != self, what, " on ", self_name, ": peer ", peer,
                 " is not another member of a group of ", size);
}

void reduce_in_order(ReduceOp op, at::Tensor& out, const std::vector<at::Tensor>& sources,
                     bool out_is_first) {
  if (sources.size() == 1) {
    if (!out_is_first) out.copy_(sources[0]);
    return;
  }
  for (size_t q = 1; q < sources.size(); ++q) {
    // The first pair straight into out: no copy of sources[0] first.
    const at::Tensor& left = q == 1 && !out_is_first ? sources[0] : out;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        at::add_out(out, left, sources[q]);
        break;
      case ReduceOp::kMin:
        at::minimum_out(out, left, sources[q]);
        break;
      case ReduceOp::kMax:
        at::maximum_out(out, left, sources[q]);
        break;
    }
  }
}

void divide_for_mean(at::Tensor& tensor, int64_t members) {
  if (at::isIntegralType(tensor.scalar_type(), /*includeBool=*/true))
    tensor.div_(members, "trunc");
  else
    tensor.div_(members);
}

WorkHandle completed_work() {
  static const auto done = std::make_shared<CompletedWork>();
  return done;
}

std::pair<int64_t, int64_t> chunk_range(int64_t rows, int size, int rank) {
  DIST_INTERNAL_ASSERT(size >= 1 && rank >= 0 && rank < size);
  const int64_t base = rows / size, extra = rows % size;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

}  // namespace dist::collective
