// reduce_scatter as a ring of send/recv, for any transport without a reduce_scatter of its own
// (LibTorch 1.13's Gloo has none); and the all-gather that completes the ring.
//
// The algorithm. Cut the input along dim 0 into size() chunks (chunk_range: uneven sizes, some
// possibly empty). In step s = 0 .. size-2, member r sends its partial result of chunk
// (r - s - 1) mod size to member r + 1 and receives the partial result of chunk (r - s - 2) from
// member r - 1, to which it adds its own part of that chunk. Chunk c thus starts at member c + 1
// and travels once around the ring, gaining one member's part per hop; after the last step,
// member r holds the whole reduction of chunk r. Every member sends and receives (size - 1)
// chunks, (size - 1) / size of the input: half of what an all-reduce of the whole input and
// keeping one chunk moves (a ring all-reduce is this ring followed by a ring all-gather).
//
// Exactness: chunk c is computed on one path only, x[c+1] op x[c+2] op ... op x[c] (indices mod
// size, left to right), so every run with the same size gives the same bits, and nobody else
// holds another copy of that chunk to disagree with. It is not the order of reduce_in_order
// (rank order), nor necessarily the bits of all_reduce for floating-point SUM; no caller needs
// that (an optimizer that shards its state would compare with its own reduce_scatter).
//
// Steps are synchronous: a step's send starts only after the previous step's receive was
// reduced. Within a step each piece of the message (kMessagePieceBytes) is reduced as soon as it
// is in, while the later pieces travel, and the last step reduces into the output: adding
// elementwise, the same bits as reducing the whole message afterwards. Empty chunks are neither
// sent nor received (every member knows every chunk's size).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "collective/transport.h"
#include "dist/core/reduce_op.h"

namespace dist::collective {

// Point-to-point tags from here on are the library's own (the ring's): user sends and recvs
// must use tags below it (ProcessCommunicator checks), so that the two never pair up.
constexpr int kFirstReservedTag = 1 << 30;
// Large point-to-point messages go in pieces of this many bytes, each piece's send issued beside
// the matching receive. Gloo's TCP pair writes a message the peer is ready for from its event
// loop, which reads nothing meanwhile: two whole 32 MiB messages crossing between two processes
// took turns on the link in about half the steps (540 ms instead of 280 at 1 Gbit/s,
// docs/hosts-scaling.md). Posting all the sends before the receives did not help; the
// interleaving does. Used by the rings here and by the bf16/fp16 hooks.
constexpr int64_t kMessagePieceBytes = int64_t{1} << 20;
// The ring's tag for collective number `sequence`: consecutive rings use different tags, so a
// message late from one can never be taken for the next one's.
inline int ring_tag(int64_t sequence) {
  return kFirstReservedTag + static_cast<int>(sequence % kFirstReservedTag);
}

// Member `rank` of `size`: the reduction of every member's `input` over `transport`, cut along
// dim 0 (a 0-dim input counts as one row), this member's chunk into `output`. MEAN is left as
// the SUM (the caller divides). Blocks until done; throws whatever the transport throws.
void reduce_scatter_by_ring(Transport& transport, int rank, int size, const at::Tensor& input,
                            at::Tensor& output, ReduceOp op, int tag);

// The ring's second half, all-gather: `rows` holds every member's part along dim 0, member m's
// being counts[m] rows from the sum of the counts before it; this member's part is in place.
// In step s member r sends part (r - s) to member r + 1 and receives part (r - s - 1) from
// member r - 1 straight into its rows: no memory beyond `rows` (c10d's Gloo all-gather makes a
// buffer of every part and copies out of it), the same bytes as Gloo's ring. Blocks until done.
void all_gather_by_ring(Transport& transport, int rank, int size, at::Tensor& rows,
                        const std::vector<int64_t>& counts, int tag);

}  // namespace dist::collective
