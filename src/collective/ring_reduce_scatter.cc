#include "collective/ring_reduce_scatter.h"

#include <ATen/ATen.h>

#include "dist/core/error.h"

namespace dist::collective {

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
    WorkHandle sent, got;
    if (partial.numel() > 0) sent = transport.send(partial, next, tag);
    if (received.numel() > 0) got = transport.recv(received, prev, tag);
    // A send may complete only once its receiver took it: wait for the receive first.
    if (got) got->wait();
    if (sent) sent->wait();
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
    WorkHandle sent, got;
    if (outgoing.numel() > 0) sent = transport.send(outgoing, next, tag);
    if (incoming.numel() > 0) got = transport.recv(incoming, prev, tag);
    // A send may complete only once its receiver took it: wait for the receive first.
    if (got) got->wait();
    if (sent) sent->wait();
  }
}

}  // namespace dist::collective
