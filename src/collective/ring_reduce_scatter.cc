#include "collective/ring_reduce_scatter.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "dist/core/error.h"

namespace dist::collective {
namespace {

// Sends `outgoing` to `next` and receives `incoming` from `prev` (either may be empty), in
// pieces, and waits for both. Both ends cut a message alike: they know its size.
void send_and_receive(Transport& transport, const at::Tensor& outgoing, int next,
                      at::Tensor& incoming, int prev, int tag) {
  const at::Tensor out = outgoing.reshape(-1);
  at::Tensor in = incoming.view(-1);  // contiguous: received in place
  const int64_t per_piece = std::max<int64_t>(1, kMessagePieceBytes / in.element_size());
  std::vector<WorkHandle> sent, got;
  for (int64_t first = 0; first < std::max(out.numel(), in.numel()); first += per_piece) {
    if (first < out.numel())
      sent.push_back(transport.send(out.narrow(0, first, std::min(per_piece, out.numel() - first)),
                                    next, tag));
    if (first < in.numel()) {
      at::Tensor piece = in.narrow(0, first, std::min(per_piece, in.numel() - first));
      got.push_back(transport.recv(piece, prev, tag));
    }
  }
  // A send may complete only once its receiver took it: wait for the receives first.
  for (auto& work : got) work->wait();
  for (auto& work : sent) work->wait();
}

}  // namespace

void reduce_scatter_by_ring(Transport& transport, int rank, int size, const at::Tensor& input,
                            at::Tensor& output, ReduceOp op, int tag) {
  const at::Tensor rows = input.dim() == 0 ? input.reshape({1}) : input.contiguous();
  auto chunk = [&](int c) {
    const auto [begin, end] = chunk_range(rows.size(0), size, (c % size + size) % size);
    return rows.slice(0, begin, end);  // contiguous: rows of a contiguous tensor
  };
  DIST_CHECK_ARG(output.numel() == chunk(rank).numel(), "reduce_scatter on member ", rank,
                 ": the output has ", output.numel(), " elements, its chunk of ", rows.size(0),
                 " rows over ", size, " members has ", chunk(rank).numel());
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  at::Tensor partial = chunk(rank - 1);  // step 0 sends this member's own part
  for (int step = 0; step < size - 1; ++step) {
    const at::Tensor own = chunk(rank - step - 2);
    at::Tensor received = at::empty_like(own, at::MemoryFormat::Contiguous);
    send_and_receive(transport, partial, next, received, prev, tag);
    reduce_in_order(op, received, {received, own}, /*out_is_first=*/true);
    partial = received;
  }
  output.copy_(partial.reshape(output.sizes()));
}

void all_gather_by_ring(Transport& transport, int rank, int size, at::Tensor& rows,
                        const std::vector<int64_t>& counts, int tag) {
  std::vector<int64_t> starts{0};
  for (int64_t c : counts) starts.push_back(starts.back() + c);
  DIST_CHECK_ARG(rows.is_contiguous() && rows.size(0) == starts.back(), "all-gather on member ",
                 rank, ": the output has ", rows.size(0), " rows, the members' parts ",
                 starts.back());
  auto part = [&](int m) {
    const auto p = static_cast<size_t>((m % size + size) % size);
    return rows.narrow(0, starts[p], counts[p]);  // contiguous: rows of a contiguous tensor
  };
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  for (int step = 0; step < size - 1; ++step) {
    const at::Tensor outgoing = part(rank - step);
    at::Tensor incoming = part(rank - step - 1);
    send_and_receive(transport, outgoing, next, incoming, prev, tag);
  }
}

}  // namespace dist::collective
