#include "collective/ring_reduce_scatter.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>

#include "dist/core/error.h"

namespace dist::collective {
namespace {

// Sends `outgoing` to `next` and receives `incoming` from `prev` (either may be empty), in
// pieces, and waits for both. Both ends cut a message alike: they know its size. `received`, if
// given, is called for each piece of `incoming` (its first element and length) as soon as that
// piece is in, in order, while the later pieces still travel.
void send_and_receive(Transport& transport, const at::Tensor& outgoing, int next,
                      at::Tensor& incoming, int prev, int tag,
                      const std::function<void(int64_t, int64_t)>& received = {}) {
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
  for (size_t k = 0; k < got.size(); ++k) {
    got[k]->wait();
    const int64_t first = static_cast<int64_t>(k) * per_piece;
    if (received) received(first, std::min(per_piece, in.numel() - first));
  }
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
  // The last step's sums go straight into `output` when it can take them flat (and is no part
  // of the input, which the step may still be sending).
  const bool direct = output.is_contiguous() && output.scalar_type() == rows.scalar_type() &&
                      !output.storage().is_alias_of(rows.storage());
  at::Tensor result = direct ? output.view(-1) : at::Tensor();
  for (int step = 0; step < size - 1; ++step) {
    const at::Tensor own = chunk(rank - step - 2).reshape(-1);
    at::Tensor received = at::empty({own.numel()}, own.options());
    const bool into_result = step == size - 2 && result.defined();
    // Each piece is added as soon as it is in, while the next ones travel: elementwise, so the
    // same bits as adding the whole message after it arrived.
    send_and_receive(
        transport, partial, next, received, prev, tag, [&](int64_t first, int64_t length) {
          at::Tensor out = (into_result ? result : received).narrow(0, first, length);
          reduce_in_order(op, out,
                          {received.narrow(0, first, length), own.narrow(0, first, length)},
                          /*out_is_first=*/!into_result);
        });
    partial = received;
    if (into_result) return;
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
