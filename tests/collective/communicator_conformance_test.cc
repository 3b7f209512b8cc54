// What every Communicator backend must do, one suite for all (communicator.h is the contract).
// A new backend passes it by adding one line to kBackends: a name, the world sizes it takes and
// how to make a group of that size (members as threads of this test, in Gloo's test style).
//
// Data are integers with an exact expected result (member_tensor / expected_sum), in every
// dtype the library communicates: int64 (step agreement), float32 (gradients, buffers) and
// float64 (metric sums), for element counts from 0 to 10000.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collective/local/local_communicator.h"
#include "collective_test_util.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

using testing::expected_sum;
using testing::member_tensor;
using testing::run_threads;

// A group of members, whatever keeps them alive, in rank order.
struct Group {
  std::vector<Communicator*> members;
  std::function<void()> release;  // tears the group down (some backends need an order)
  ~Group() {
    if (release) release();
  }
};
using MakeGroup = std::function<std::unique_ptr<Group>(int size, std::chrono::milliseconds)>;

std::unique_ptr<Group> own(std::vector<std::unique_ptr<Communicator>> members) {
  auto group = std::make_unique<Group>();
  auto held = std::make_shared<std::vector<std::unique_ptr<Communicator>>>(std::move(members));
  for (auto& m : *held) group->members.push_back(m.get());
  // Rank 0 may host the rendezvous store: the others let go first.
  group->release = [held] { testing::release(*held); };
  return group;
}

std::unique_ptr<Group> local_group(int size, std::chrono::milliseconds timeout) {
  LocalGroupOptions options;
  options.size = size;
  options.timeout = timeout;
  std::vector<std::unique_ptr<Communicator>> members;
  for (auto& m : make_local_group(options)) members.push_back(std::move(m));
  return own(std::move(members));
}

// Two processes of size / 2 replicas each: the in-process stage and Gloo composed.
std::unique_ptr<Group> two_process_group(int size, std::chrono::milliseconds timeout) {
  std::shared_ptr<testing::World> world = testing::hierarchical_world(2, size / 2, timeout);
  auto group = std::make_unique<Group>();
  for (auto& m : world->replicas) group->members.push_back(m.get());
  group->release = [world]() mutable { world.reset(); };
  return group;
}

struct Backend {
  const char* name;
  std::vector<int> sizes;
  MakeGroup make;
};

// Every backend and the world sizes it is tested at. Adding a backend is adding a line here.
const std::vector<Backend>& backends() {
  static const std::vector<Backend> kBackends = {
      {"local", {1, 2, 3, 4, 5, 7}, local_group},
      {"gloo",
       {1, 2, 3, 4, 5, 7},
       [](int size, auto timeout) { return own(testing::gloo_group(size, timeout)); }},
      {"gloo_same_host_memory",
       {2, 3, 5},
       [](int size, auto timeout) { return own(testing::same_host_group(size, timeout)); }},
      {"hierarchical_two_processes", {2, 4, 6}, two_process_group},
  };
  return kBackends;
}

struct Case {
  size_t backend;
  int size;
};

std::vector<Case> every_case() {
  std::vector<Case> cases;
  for (size_t b = 0; b < backends().size(); ++b)
    for (int size : backends()[b].sizes) cases.push_back({b, size});
  return cases;
}

// The deadline cases: each backend's two smallest groups that have someone to wait for (a
// timeout costs seconds; larger groups wait the same way).
std::vector<Case> deadline_cases() {
  std::vector<Case> cases;
  for (size_t b = 0; b < backends().size(); ++b) {
    int taken = 0;
    for (int size : backends()[b].sizes)
      if (size >= 2 && taken++ < 2) cases.push_back({b, size});
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(backends()[info.param.backend].name) + "_" + std::to_string(info.param.size);
}

class CommunicatorTest : public ::testing::TestWithParam<Case> {
 protected:
  std::unique_ptr<Group> make(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    return backends()[GetParam().backend].make(GetParam().size, timeout);
  }
};

const std::vector<at::ScalarType> kDtypes = {at::kLong, at::kFloat, at::kDouble};
const std::vector<int64_t> kCounts = {0, 1, 7, 1000, 10000};

void all_reduce_is_exact(Communicator& c, int size) {
  const int g = c.rank();
  for (at::ScalarType dtype : kDtypes) {
    for (int64_t n : kCounts) {
      std::vector<at::Tensor> sum{member_tensor(g, 0, n).to(dtype),
                                  member_tensor(g, 1, 3).to(dtype)};
      c.all_reduce(sum, ReduceOp::kSum)->wait();
      ASSERT_TRUE(at::equal(sum[0], expected_sum(size, 0, n).to(dtype))) << dtype << " x " << n;
      ASSERT_TRUE(at::equal(sum[1], expected_sum(size, 1, 3).to(dtype))) << dtype;
    }
    std::vector<at::Tensor> hi{member_tensor(g, 0, 5).to(dtype)}, lo{hi[0].clone()};
    c.all_reduce(hi, ReduceOp::kMax)->wait();
    c.all_reduce(lo, ReduceOp::kMin)->wait();
    ASSERT_TRUE(at::equal(hi[0], member_tensor(size - 1, 0, 5).to(dtype))) << dtype;
    ASSERT_TRUE(at::equal(lo[0], member_tensor(0, 0, 5).to(dtype))) << dtype;
    // MEAN of (rank + 1) * 2 is size + 1, exactly, in every dtype.
    std::vector<at::Tensor> mean{at::full({4}, 2 * (g + 1), dtype)};
    c.all_reduce(mean, ReduceOp::kMean)->wait();
    ASSERT_TRUE(at::equal(mean[0], at::full({4}, size + 1, dtype))) << dtype;
  }
}

void broadcast_and_gather_are_exact(Communicator& c, int size) {
  const int g = c.rank();
  for (int root = 0; root < size; ++root) {
    std::vector<at::Tensor> b{member_tensor(g, 0, 4).to(at::kFloat)};
    c.broadcast(b, root)->wait();
    ASSERT_TRUE(at::equal(b[0], member_tensor(root, 0, 4).to(at::kFloat))) << "root " << root;
  }
  for (at::ScalarType dtype : kDtypes) {
    at::Tensor gathered;  // uneven: rank q gives q rows
    c.all_gather(at::full({g, 3}, g, dtype), &gathered)->wait();
    std::vector<at::Tensor> parts;
    for (int q = 0; q < size; ++q) parts.push_back(at::full({q, 3}, q, dtype));
    ASSERT_TRUE(at::equal(gathered, at::cat(parts, 0))) << dtype;
  }
}

// Every op, rows from none to fewer than members (empty chunks) to many, rows of one value and
// of three: over Gloo this is the ring of send/recv (ring_reduce_scatter.h), which adds in
// another order per chunk; integer data keep the expected result exact.
void reduce_scatter_is_exact(Communicator& c, int size) {
  const int g = c.rank();
  for (at::ScalarType dtype : kDtypes) {
    for (int64_t rows : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{13}, int64_t{10000}}) {
      const auto [begin, end] = chunk_range(rows, size, g);
      at::Tensor chunk = at::empty({end - begin}, dtype);
      c.reduce_scatter(member_tensor(g, 0, rows).to(dtype), chunk, ReduceOp::kSum)->wait();
      ASSERT_TRUE(at::equal(chunk, expected_sum(size, 0, rows).slice(0, begin, end).to(dtype)))
          << dtype << " x " << rows;
    }
    const int64_t rows = 11;
    const auto [begin, end] = chunk_range(rows, size, g);
    const at::Tensor mine = member_tensor(g, 0, rows * 3).to(dtype).view({rows, 3});
    at::Tensor chunk = at::empty({end - begin, 3}, dtype);
    c.reduce_scatter(mine, chunk, ReduceOp::kMax)->wait();
    ASSERT_TRUE(at::equal(
        chunk, member_tensor(size - 1, 0, rows * 3).to(dtype).view({rows, 3}).slice(0, begin, end)))
        << dtype << " MAX";
    c.reduce_scatter(mine, chunk, ReduceOp::kMin)->wait();
    ASSERT_TRUE(at::equal(
        chunk, member_tensor(0, 0, rows * 3).to(dtype).view({rows, 3}).slice(0, begin, end)))
        << dtype << " MIN";
    c.reduce_scatter(mine, chunk, ReduceOp::kMean)->wait();
    at::Tensor mean = expected_sum(size, 0, rows * 3).to(dtype).view({rows, 3});
    divide_for_mean(mean, size);  // exact: the sum is
    ASSERT_TRUE(at::equal(chunk, mean.slice(0, begin, end))) << dtype << " MEAN";
  }
}

void point_to_point_is_exact(Communicator& c, int size) {
  const int g = c.rank();
  if (size == 1) return;  // no peer
  // Around the ring. A send may complete only once its receiver took it: wait after the recv.
  for (int64_t n : {int64_t{0}, int64_t{6}, int64_t{10000}}) {
    auto sent = c.send(member_tensor(g, 0, n).to(at::kFloat), (g + 1) % size, 5);
    at::Tensor got = at::empty({n}, at::kFloat);
    const int from = (g + size - 1) % size;
    c.recv(got, from, 5)->wait();
    sent->wait();
    ASSERT_TRUE(at::equal(got, member_tensor(from, 0, n).to(at::kFloat))) << n;
  }
}

class CommunicatorConformanceTest : public CommunicatorTest {};
class CommunicatorDeadlineTest : public CommunicatorTest {};

TEST_P(CommunicatorConformanceTest, EveryCollectiveIsExact) {
  auto group = make();
  const int size = GetParam().size;
  ASSERT_EQ(static_cast<int>(group->members.size()), size);
  run_threads(size, [&](int g) {
    Communicator& c = *group->members[static_cast<size_t>(g)];
    ASSERT_EQ(c.rank(), g);
    ASSERT_EQ(c.size(), size);
    all_reduce_is_exact(c, size);
    broadcast_and_gather_are_exact(c, size);
    reduce_scatter_is_exact(c, size);
    point_to_point_is_exact(c, size);
    c.barrier()->wait();
    const auto values = c.exchange("names", "r" + std::to_string(g));
    ASSERT_EQ(values.size(), static_cast<size_t>(size));
    for (int q = 0; q < size; ++q)
      ASSERT_EQ(values[static_cast<size_t>(q)], "r" + std::to_string(q));
  });
}

// The last member never comes: every other member's all_reduce fails within the group's
// timeout with a CollectiveError that names it.
TEST_P(CommunicatorDeadlineTest, AMemberThatNeverComesIsNamedWithinTheTimeout) {
  const int size = GetParam().size;
  auto group = make(std::chrono::milliseconds(1000));
  const int missing = size - 1;
  const std::string missing_name = group->members[0]->member_name(missing);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> messages(static_cast<size_t>(missing));
  run_threads(missing, [&](int g) {
    std::vector<at::Tensor> t{member_tensor(g, 0, 4)};
    try {
      group->members[static_cast<size_t>(g)]->all_reduce(t, ReduceOp::kSum)->wait();
      ADD_FAILURE() << "all_reduce completed without " << missing_name;
    } catch (const CollectiveError& e) {
      messages[static_cast<size_t>(g)] = e.what();
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  // A member of the missing member's process names it ("replica 2 of worker:1 (...)"); one of
  // another process can know only which process did not come ("worker:1 (...)").
  const size_t of = missing_name.find(" of ");
  const std::string holder = of == std::string::npos ? missing_name : missing_name.substr(of + 4);
  for (int g = 0; g < missing; ++g) {
    std::string message = messages[static_cast<size_t>(g)];
    // The in-process stage lists every missing replica: "replica(s) 2 of worker:1 (...)".
    for (size_t at; (at = message.find("replica(s) ")) != std::string::npos;)
      message.replace(at, 11, "replica ");
    const bool same_process = group->members[0]->member_name(g).find(holder) != std::string::npos;
    const std::string expected = same_process ? missing_name : holder;
    EXPECT_NE(message.find(expected), std::string::npos)
        << "member " << g << "'s error does not name " << expected << ": " << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorConformanceTest, ::testing::ValuesIn(every_case()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorDeadlineTest, ::testing::ValuesIn(deadline_cases()),
                         case_name);

}  // namespace
}  // namespace dist::collective
