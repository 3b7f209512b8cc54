// What every Communicator backend must do, one suite for all (communicator.h is the contract).
// A new backend passes it by adding one line to kBackends: a name, the world sizes it takes and
// how to make a group of that size (members as threads of this test, in Gloo's test style), or,
// for a backend with one member per process (MPI), how to make this process's member: the case
// then starts its members with mpirun, each running this binary's CommunicatorMember test of the
// same name, which runs the same checks on its one member.
//
// Data are integers with an exact expected result (member_tensor / expected_sum), in every
// dtype the library communicates: int64 (step agreement), float32 (gradients, buffers) and
// float64 (metric sums), for element counts from 0 to 10000.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collective/backends_built.h"
#include "collective/local/local_communicator.h"
#include "collective_test_util.h"
#include "dist/core/error.h"
#include "multi_worker/process_group.h"
#include "test_util.h"

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

// This process's member of a group of `size` members whose store rank 0 hosts at 127.0.0.1:port.
using MakeMember = std::function<std::unique_ptr<Communicator>(int rank, int size, int port,
                                                               std::chrono::milliseconds)>;

struct Backend {
  const char* name;
  std::vector<int> sizes;
  MakeGroup make;          // members as threads of this process
  MakeMember member = {};  // or: one member per process, under mpirun
};

std::unique_ptr<Communicator> mpi_member(int rank, int size, int port,
                                         std::chrono::milliseconds timeout) {
  std::vector<int> ports(static_cast<size_t>(size), port);  // MPI's members need only the store
  ProcessGroupSpec spec = testing::loopback_spec(rank, ports, timeout);
  spec.store_in_process = false;  // in dist-store-host, which outlives rank 0 (as in dist-train)
  return make_process_communicator("mpi", spec);
}

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
#if DIST_HAVE_MPI
    {"mpi", {1, 2, 3, 4}, nullptr, mpi_member},
#endif
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
    // Into a given tensor, the input being this member's own rows of it (as the sharded step
    // gathers its chunks into its parameters); chunks of 13 rows differ in size by one.
    at::Tensor all = at::full({13, 3}, -1, dtype);
    const auto [begin, end] = chunk_range(13, size, g);
    at::Tensor mine = all.narrow(0, begin, end - begin);
    mine.fill_(g);
    c.all_gather_into(mine, all)->wait();
    for (int q = 0; q < size; ++q) {
      const auto [first, last] = chunk_range(13, size, q);
      ASSERT_TRUE(
          at::equal(all.narrow(0, first, last - first), at::full({last - first, 3}, q, dtype)))
          << dtype << ", member " << q;
    }
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

void every_collective_is_exact(Communicator& c, int g, int size) {
  ASSERT_EQ(c.rank(), g);
  ASSERT_EQ(c.size(), size);
  all_reduce_is_exact(c, size);
  broadcast_and_gather_are_exact(c, size);
  reduce_scatter_is_exact(c, size);
  point_to_point_is_exact(c, size);
  c.barrier()->wait();
  const auto values = c.exchange("names", "r" + std::to_string(g));
  ASSERT_EQ(values.size(), static_cast<size_t>(size));
  for (int q = 0; q < size; ++q) ASSERT_EQ(values[static_cast<size_t>(q)], "r" + std::to_string(q));
}

// Member g (not the last) of a group whose last member never comes: its all_reduce fails with
// a CollectiveError; returns the message.
std::string all_reduce_without_the_last(Communicator& c, int g) {
  std::vector<at::Tensor> t{member_tensor(g, 0, 4)};
  try {
    c.all_reduce(t, ReduceOp::kSum)->wait();
  } catch (const CollectiveError& e) {
    return e.what();
  }
  ADD_FAILURE() << "all_reduce completed without " << c.member_name(c.size() - 1);
  return "";
}

// Whether member g's error names the missing member (or, from another process, its process).
void expect_names_missing(const std::string& error, const std::string& member_g,
                          const std::string& missing_name) {
  // A member of the missing member's process names it ("replica 2 of worker:1 (...)"); one of
  // another process can know only which process did not come ("worker:1 (...)").
  const size_t of = missing_name.find(" of ");
  const std::string holder = of == std::string::npos ? missing_name : missing_name.substr(of + 4);
  std::string message = error;
  // The in-process stage lists every missing replica: "replica(s) 2 of worker:1 (...)".
  for (size_t at; (at = message.find("replica(s) ")) != std::string::npos;)
    message.replace(at, 11, "replica ");
  const bool same_process = member_g.find(holder) != std::string::npos;
  const std::string expected = same_process ? missing_name : holder;
  EXPECT_NE(message.find(expected), std::string::npos)
      << member_g << "'s error does not name " << expected << ": " << message;
}

// For a backend of one member per process: runs CommunicatorMember.`test` in `size` processes
// started by mpirun (this binary, each with its own member): `passing` of them pass it and none
// fails.
void run_members_under_mpirun(const Case& c, const std::string& test, int passing,
                              std::chrono::milliseconds timeout,
                              const dist::testing::TempDir& dir) {
  std::vector<std::string> args;
  if (geteuid() == 0) args.push_back("--allow-run-as-root");
  args.insert(args.end(), {"--oversubscribe", "-np", std::to_string(c.size), "-x", "DIST_MEMBER_OF",
                           std::filesystem::read_symlink("/proc/self/exe").string(),
                           "--gtest_color=no", "--gtest_filter=CommunicatorMember." + test});
  const int port = free_loopback_ports(1).at(0);
  dist::testing::WorkerProcesses mpirun;
  const std::string mpirun_path = dist::testing::find_program("mpirun");
  if (mpirun_path.empty()) GTEST_SKIP() << "mpirun is not installed (apt-get install openmpi-bin)";
  mpirun.start(mpirun_path, args,
               {"DIST_MEMBER_OF=" + std::to_string(c.backend) + "," + std::to_string(port) + "," +
                std::to_string(timeout.count()) + "," + dir.path()});
  const auto result = mpirun.wait_all(std::chrono::seconds(120)).at(0);
  EXPECT_EQ(dist::testing::occurrences(result.output, "[       OK ] CommunicatorMember." + test),
            passing)
      << result.output;
  EXPECT_EQ(result.output.find("[  FAILED  ]"), std::string::npos) << result.output;
}

class CommunicatorConformanceTest : public CommunicatorTest {};
class CommunicatorDeadlineTest : public CommunicatorTest {};

TEST_P(CommunicatorConformanceTest, EveryCollectiveIsExact) {
  const int size = GetParam().size;
  if (backends()[GetParam().backend].member) {
    dist::testing::TempDir dir;
    run_members_under_mpirun(GetParam(), "EveryCollectiveIsExact", size, std::chrono::seconds(30),
                             dir);
    return;
  }
  auto group = make();
  ASSERT_EQ(static_cast<int>(group->members.size()), size);
  run_threads(size, [&](int g) {
    every_collective_is_exact(*group->members[static_cast<size_t>(g)], g, size);
  });
}

// The last member never comes: every other member's all_reduce fails within the group's
// timeout with a CollectiveError that names it.
TEST_P(CommunicatorDeadlineTest, AMemberThatNeverComesIsNamedWithinTheTimeout) {
  const int size = GetParam().size;
  const auto start = std::chrono::steady_clock::now();
  if (backends()[GetParam().backend].member) {
    dist::testing::TempDir dir;
    // The members that fail do not finalize MPI (operations are left in flight), so mpirun
    // reports them as ending abnormally: what counts is each member's own verdict.
    run_members_under_mpirun(GetParam(), "AMemberThatNeverComesIsNamedWithinTheTimeout", size,
                             std::chrono::milliseconds(1000), dir);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
    return;
  }
  auto group = make(std::chrono::milliseconds(1000));
  const int missing = size - 1;
  std::vector<std::string> messages(static_cast<size_t>(missing));
  run_threads(missing, [&](int g) {
    messages[static_cast<size_t>(g)] =
        all_reduce_without_the_last(*group->members[static_cast<size_t>(g)], g);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  for (int g = 0; g < missing; ++g)
    expect_names_missing(messages[static_cast<size_t>(g)], group->members[0]->member_name(g),
                         group->members[0]->member_name(missing));
}

// A member process of a case above (DIST_MEMBER_OF="backend,store port,timeout ms,directory",
// set by run_members_under_mpirun), with this process's member of the group mpirun started.
struct MemberProcess {
  std::unique_ptr<Communicator> member;
  std::string dir;
};

std::optional<MemberProcess> member_process() {
  const char* of = std::getenv("DIST_MEMBER_OF");
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (of == nullptr || rank == nullptr || size == nullptr) return std::nullopt;
  std::istringstream fields(of);
  size_t backend = 0;
  int port = 0;
  int64_t timeout = 0;
  char comma = 0;
  MemberProcess process;
  fields >> backend >> comma >> port >> comma >> timeout >> comma;
  std::getline(fields, process.dir);
  process.member = backends().at(backend).member(std::atoi(rank), std::atoi(size), port,
                                                 std::chrono::milliseconds(timeout));
  return process;
}

constexpr const char* kNotAMember =
    "runs only as a member process of CommunicatorConformanceTest or CommunicatorDeadlineTest "
    "(started by them under mpirun)";

TEST(CommunicatorMember, EveryCollectiveIsExact) {
  auto process = member_process();
  if (!process) GTEST_SKIP() << kNotAMember;
  Communicator& c = *process->member;
  every_collective_is_exact(c, c.rank(), c.size());
}

TEST(CommunicatorMember, AMemberThatNeverComesIsNamedWithinTheTimeout) {
  auto process = member_process();
  if (!process) GTEST_SKIP() << kNotAMember;
  Communicator& c = *process->member;
  const int missing = c.size() - 1;
  if (c.rank() != missing) {
    expect_names_missing(all_reduce_without_the_last(c, c.rank()), c.member_name(c.rank()),
                         c.member_name(missing));
    std::ofstream(process->dir + "/done." + std::to_string(c.rank())) << "done";
  }
  // Every member (the missing one alive, issuing nothing) stays until all have their verdict:
  // the first to exit unfinalized makes mpirun end the others.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int r = 0; r < missing && std::chrono::steady_clock::now() < until;)
    if (std::filesystem::exists(process->dir + "/done." + std::to_string(r)))
      ++r;
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorConformanceTest, ::testing::ValuesIn(every_case()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorDeadlineTest, ::testing::ValuesIn(deadline_cases()),
                         case_name);

}  // namespace
}  // namespace dist::collective
