// reduce_scatter as a ring of send/recv (ring_reduce_scatter.h) over an in-process transport:
// the documented order of reduction (bit for bit, on floats), and what each member sends.
#include "collective/ring_reduce_scatter.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "collective/local/local_communicator.h"
#include "collective_test_util.h"
#include "local_transport.h"

namespace dist::collective {
namespace {

using testing::LocalTransport;
using testing::run_threads;

// Member r's input: random floats (the order of additions shows in their bits), rows x 3.
at::Tensor input_of(int rank, int64_t rows) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 + rank);
  return at::randn({rows, 3}, generator, at::kFloat);
}

// Chunk c of the reduction as the ring computes it: x[c+1] op x[c+2] op ... op x[c].
at::Tensor ring_order_reference(int size, int64_t rows, int c, ReduceOp op) {
  const auto [begin, end] = chunk_range(rows, size, c);
  at::Tensor acc = input_of((c + 1) % size, rows).slice(0, begin, end).clone();
  for (int k = 2; k <= size; ++k)
    reduce_in_order(op, acc, {acc, input_of((c + k) % size, rows).slice(0, begin, end)}, true);
  return acc;
}

// Runs the ring on `size` threads; returns each member's transport (what it sent).
std::vector<std::unique_ptr<LocalTransport>> run_ring(int size, int64_t rows, ReduceOp op,
                                                      std::vector<at::Tensor>* outputs) {
  LocalGroupOptions options;
  options.size = size;
  auto members = make_local_group(options);
  std::vector<std::unique_ptr<LocalTransport>> transports;
  for (auto& m : members) transports.push_back(std::make_unique<LocalTransport>(*m));
  outputs->assign(static_cast<size_t>(size), at::Tensor());
  run_threads(size, [&](int r) {
    const auto [begin, end] = chunk_range(rows, size, r);
    at::Tensor out = at::empty({end - begin, 3}, at::kFloat);
    reduce_scatter_by_ring(*transports[static_cast<size_t>(r)], r, size, input_of(r, rows), out, op,
                           ring_tag(1));
    (*outputs)[static_cast<size_t>(r)] = out;
  });
  return transports;
}

TEST(RingReduceScatterTest, EachChunkIsReducedInTheDocumentedOrderBitForBit) {
  for (int size : {1, 2, 3, 4, 5, 7}) {
    for (int64_t rows : {0, 1, 2, 3, 13, 100}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
        std::vector<at::Tensor> outputs;
        run_ring(size, rows, op, &outputs);
        for (int r = 0; r < size; ++r)
          ASSERT_TRUE(
              at::equal(outputs[static_cast<size_t>(r)], ring_order_reference(size, rows, r, op)))
              << "size " << size << ", rows " << rows << ", member " << r;
      }
    }
  }
}

// A step's message larger than a piece (1 MiB: the ring sends in pieces, each send beside its
// receive) arrives whole and in order: 200000 rows of 3 floats, 1.2 MB a chunk for 2 members.
TEST(RingReduceScatterTest, MessagesLargerThanAPieceArriveWholeAndInOrder) {
  for (int size : {2, 3}) {
    std::vector<at::Tensor> outputs;
    run_ring(size, 200000, ReduceOp::kSum, &outputs);
    for (int r = 0; r < size; ++r)
      ASSERT_TRUE(at::equal(outputs[static_cast<size_t>(r)],
                            ring_order_reference(size, 200000, r, ReduceOp::kSum)))
          << "size " << size << ", member " << r;
  }
}

// Each member sends every chunk but its own once: (size - 1) / size of the input, half of the
// 2 (size - 1) / size that a ring all-reduce of the whole input sends.
TEST(RingReduceScatterTest, EachMemberSendsTheInputLessItsOwnChunk) {
  for (int size : {2, 3, 4, 7}) {
    for (int64_t rows : {1, 2, 13, 1000}) {
      std::vector<at::Tensor> outputs;
      auto transports = run_ring(size, rows, ReduceOp::kSum, &outputs);
      const int64_t row_bytes = 3 * sizeof(float);
      for (int r = 0; r < size; ++r) {
        const auto [begin, end] = chunk_range(rows, size, r);
        EXPECT_EQ(transports[static_cast<size_t>(r)]->bytes_sent,
                  (rows - (end - begin)) * row_bytes)
            << "size " << size << ", rows " << rows << ", member " << r;
        EXPECT_LE(transports[static_cast<size_t>(r)]->messages_sent, size - 1);
      }
    }
  }
}

TEST(RingReduceScatterTest, AnOutputOfTheWrongSizeIsNamedBeforeAnythingIsSent) {
  LocalGroupOptions options;
  options.size = 1;
  auto members = make_local_group(options);
  LocalTransport transport(*members[0]);
  at::Tensor out = at::empty({2, 3});
  EXPECT_THROW(
      reduce_scatter_by_ring(transport, 0, 1, at::zeros({5, 3}), out, ReduceOp::kSum, ring_tag(1)),
      InvalidArgument);
  EXPECT_EQ(transport.messages_sent, 0);
}

TEST(RingReduceScatterTest, RingTagsAreReservedAndDifferForConsecutiveCollectives) {
  EXPECT_GE(ring_tag(1), kFirstReservedTag);
  EXPECT_NE(ring_tag(1), ring_tag(2));
  EXPECT_GE(ring_tag(int64_t{1} << 40), kFirstReservedTag);
}

// The ring's all-gather: every member ends with every part in place, parts of uneven sizes and
// empty ones included, each member sending only its own and the ones it relays.
TEST(RingAllGatherTest, EveryMemberGetsEveryPartInItsRows) {
  for (int size : {1, 2, 3, 5}) {
    for (const std::vector<int64_t>& pattern :
         {std::vector<int64_t>{4, 4, 4, 4, 4}, std::vector<int64_t>{3, 0, 2, 1, 0},
          // parts larger than a piece (1 MiB), of different sizes
          std::vector<int64_t>{300000, 170000, 0, 5, 140000}}) {
      const std::vector<int64_t> counts(pattern.begin(), pattern.begin() + size);
      int64_t total = 0;
      for (int64_t c : counts) total += c;
      LocalGroupOptions options;
      options.size = size;
      auto members = make_local_group(options);
      std::vector<std::unique_ptr<LocalTransport>> transports;
      for (auto& m : members) transports.push_back(std::make_unique<LocalTransport>(*m));
      std::vector<at::Tensor> rows(static_cast<size_t>(size));
      run_threads(size, [&](int r) {
        at::Tensor mine = at::full({total, 2}, -1.0f);
        int64_t first = 0;
        for (int m = 0; m < r; ++m) first += counts[static_cast<size_t>(m)];
        mine.narrow(0, first, counts[static_cast<size_t>(r)]).fill_(static_cast<float>(r));
        all_gather_by_ring(*transports[static_cast<size_t>(r)], r, size, mine, counts, ring_tag(2));
        rows[static_cast<size_t>(r)] = mine;
      });
      std::vector<at::Tensor> parts;
      for (int m = 0; m < size; ++m)
        parts.push_back(at::full({counts[static_cast<size_t>(m)], 2}, static_cast<float>(m)));
      const at::Tensor expected = at::cat(parts, 0);
      for (int r = 0; r < size; ++r)
        ASSERT_TRUE(at::equal(rows[static_cast<size_t>(r)], expected))
            << size << " members, member " << r;
    }
  }
}

}  // namespace
}  // namespace dist::collective
