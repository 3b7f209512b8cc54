// The ps task's service over real gRPC on 127.0.0.1: variables whole and sharded, dense and
// sparse updates equal to LibTorch's local optimizer step, row lookups that move only the
// rows asked for, and bad requests answered with named errors while the server keeps serving.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/distribute/partitioner.h"
#include "ps/ps_client.h"
#include "ps/ps_service.h"
#include "ps/task_server.h"
#include "ps/tensor_codec.h"

namespace dist::ps {
namespace {

using namespace std::chrono_literals;

// `count` ps tasks in this process, each on its own port of 127.0.0.1.
struct LocalPs {
  explicit LocalPs(int count) {
    for (int i = 0; i < count; ++i) {
      const std::string name = "ps:" + std::to_string(i);
      liveness.push_back(std::make_unique<TaskLiveness>(60s));
      services.push_back(std::make_unique<ParameterServerService>(name, liveness.back().get()));
      servers.push_back(std::make_unique<TaskServer>(
          name, "127.0.0.1:0", std::vector<grpc::Service*>{services.back().get()}));
      tasks.push_back({name, "127.0.0.1:" + std::to_string(servers.back()->port())});
    }
  }
  ParameterServers client(std::chrono::milliseconds timeout = 5s) {
    return ParameterServers(tasks, timeout);
  }
  std::vector<std::unique_ptr<TaskLiveness>> liveness;
  std::vector<std::unique_ptr<ParameterServerService>> services;
  std::vector<std::unique_ptr<TaskServer>> servers;
  std::vector<Task> tasks;
};

rpc::OptimizerConfig sgd(double lr, double momentum = 0) {
  rpc::OptimizerConfig c;
  c.set_kind("SGD");
  (*c.mutable_options())["lr"] = lr;
  (*c.mutable_options())["momentum"] = momentum;
  return c;
}

TEST(PartitionerTest, ShardCountsFollowTensorFlowsPartitioners) {
  EXPECT_EQ(Partitioner().num_shards({100, 4}, at::kFloat), 1);
  EXPECT_EQ(Partitioner::fixed_shards(3).num_shards({100, 4}, at::kFloat), 3);
  EXPECT_EQ(Partitioner::fixed_shards(3).num_shards({2, 4}, at::kFloat), 2);  // not past the rows
  EXPECT_EQ(Partitioner::fixed_shards(3).num_shards({}, at::kFloat), 1);      // a scalar
  // 1000 x 64 floats = 256,000 bytes.
  EXPECT_EQ(Partitioner::min_size(64000, 8).num_shards({1000, 64}, at::kFloat), 4);
  EXPECT_EQ(Partitioner::min_size(64000, 2).num_shards({1000, 64}, at::kFloat), 2);
  EXPECT_EQ(Partitioner::min_size(1 << 20, 8).num_shards({1000, 64}, at::kFloat), 1);
  EXPECT_EQ(Partitioner::max_size(100000).num_shards({1000, 64}, at::kFloat), 3);
  EXPECT_EQ(Partitioner::max_size(100000, 2).num_shards({1000, 64}, at::kFloat), 2);
  EXPECT_EQ(Partitioner::shard_rows(10, 3), (std::vector<int64_t>{4, 3, 3}));
  EXPECT_THROW(Partitioner::fixed_shards(0), InvalidArgument);
}

TEST(TensorCodecTest, RoundTripsEveryDtypeAndRefusesBadMessagesByName) {
  for (auto type : {at::kFloat, at::kDouble, at::kLong, at::kInt, at::kBFloat16}) {
    at::Tensor t = torch::arange(12).reshape({3, 4}).to(type);
    EXPECT_TRUE(torch::equal(decode_tensor(encode_tensor(t), "t"), t));
  }
  rpc::Tensor short_data = encode_tensor(torch::ones({3, 4}));
  short_data.mutable_data()->resize(40);
  try {
    decode_tensor(short_data, "gradient of 'w'");
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("gradient of 'w': 40 bytes of data for shape [3, 4]"),
              std::string::npos)
        << e.what();
  }
  rpc::Tensor negative = encode_tensor(torch::ones({2}));
  negative.set_shape(0, -2);
  EXPECT_THROW(decode_tensor(negative, "x"), DataError);
  rpc::Tensor huge = encode_tensor(torch::ones({2}));
  huge.set_shape(0, int64_t{1} << 62);
  EXPECT_THROW(decode_tensor(huge, "x"), DataError);
}

TEST(ParameterServerServiceTest, DenseSgdUpdatesEqualALocalStepBitForBit) {
  LocalPs cluster(1);
  auto ps = cluster.client();
  ps.wait_until_ready(5s, "test");
  torch::manual_seed(0);
  at::Tensor w = torch::randn({5, 3});
  auto placed = ps.place("m0/w", w, Partitioner());
  ps.create(placed, w);
  at::Tensor local = w.clone().set_requires_grad(true);
  torch::optim::SGD optimizer({local}, torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 3; ++step) {
    at::Tensor g = torch::randn({5, 3});
    local.mutable_grad() = g.clone();
    optimizer.step();
    ps.apply(sgd(0.1, 0.9), {{&placed, g}}, {});
  }
  EXPECT_TRUE(torch::equal(ps.read({&placed})[0], local.detach()));
}

TEST(ParameterServerServiceTest, TwoPsTasksWithAPartitionedVariableEqualOne) {
  LocalPs one(1), two(2);
  auto a = one.client(), b = two.client();
  torch::manual_seed(1);
  at::Tensor w = torch::randn({7, 4});
  auto whole = a.place("w", w, Partitioner());
  auto sharded = b.place("w", w, Partitioner::fixed_shards(2));
  ASSERT_EQ(sharded.ps, (std::vector<int>{0, 1}));
  ASSERT_EQ(sharded.rows, (std::vector<int64_t>{4, 3}));
  a.create(whole, w);
  b.create(sharded, w);
  for (int step = 0; step < 4; ++step) {
    at::Tensor g = torch::randn({7, 4});
    a.apply(sgd(0.05), {{&whole, g}}, {});
    b.apply(sgd(0.05), {{&sharded, g}}, {});
  }
  EXPECT_TRUE(torch::equal(a.read({&whole})[0], b.read({&sharded})[0]));
}

TEST(ParameterServerServiceTest, LookupsAndSparseUpdatesMoveOnlyTheRowsAskedFor) {
  LocalPs cluster(2);
  auto ps = cluster.client(30s);
  const int64_t rows = 1000000, columns = 64;
  at::Tensor table = torch::zeros({rows, columns});
  auto placed = ps.place("embedding", table, Partitioner::fixed_shards(2));
  ps.create(placed, table);
  const int64_t before = ps.bytes_received();
  at::Tensor ids = torch::tensor({3, 999999, 500000, 3}, at::kLong);  // both shards, a repeat
  at::Tensor looked_up = ps.lookup(placed, ids);
  EXPECT_EQ(looked_up.sizes(), (std::vector<int64_t>{4, columns}));
  EXPECT_EQ(ps.bytes_received() - before, 4 * columns * 4);  // four rows of float32, no more

  const int64_t sent_before = ps.bytes_sent();
  at::Tensor update_rows = torch::tensor({3, 999999}, at::kLong);
  at::Tensor values = torch::ones({2, columns});
  ps.apply(sgd(0.5), {}, {{&placed, {update_rows, values}}});
  EXPECT_EQ(ps.bytes_sent() - sent_before, 2 * columns * 4 + 2 * 8);  // the rows and their ids
  at::Tensor after = ps.lookup(placed, torch::tensor({3, 4, 999999, 999998}, at::kLong));
  EXPECT_TRUE(torch::equal(after[0], torch::full({columns}, -0.5)));
  EXPECT_TRUE(torch::equal(after[1], torch::zeros({columns})));
  EXPECT_TRUE(torch::equal(after[2], torch::full({columns}, -0.5)));
  EXPECT_TRUE(torch::equal(after[3], torch::zeros({columns})));
}

// Calls on one ps task's service directly (not through ParameterServers, whose own checks
// would refuse these requests first), each with a deadline of 5 s.
struct RawPs {
  explicit RawPs(const std::string& address)
      : stub(rpc::ParameterServer::NewStub(open_channel(address))) {}
  template <typename Method, typename Request, typename Response>
  grpc::Status call(Method method, const Request& request, Response* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 5s);
    return ((*stub).*method)(&context, request, response);
  }
  std::unique_ptr<rpc::ParameterServer::Stub> stub;
};

// Requests for variable 'w' (2 x 2 ones) that the server must refuse, naming what is wrong.
void expect_malformed_requests_refused(RawPs& ps) {
  rpc::CreateVariableResponse created;
  // A tensor whose byte count does not match its shape.
  rpc::ApplyGradientsRequest bad_bytes;
  *bad_bytes.mutable_optimizer() = sgd(0.1);
  auto* dense = bad_bytes.add_dense();
  dense->set_name("w");
  *dense->mutable_gradient() = encode_tensor(torch::ones({2, 2}));
  dense->mutable_gradient()->mutable_data()->pop_back();
  rpc::ApplyGradientsResponse applied;
  grpc::Status status = ps.call(&rpc::ParameterServer::Stub::ApplyGradients, bad_bytes, &applied);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("ps:0: gradient of 'w': 15 bytes"), std::string::npos)
      << status.error_message();

  // A variable the server does not have.
  rpc::ReadRequest unknown;
  unknown.add_names("nope");
  rpc::ReadResponse read;
  status = ps.call(&rpc::ParameterServer::Stub::Read, unknown, &read);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("no variable 'nope'"), std::string::npos);

  // Rows outside the table, and a row twice in one sparse update.
  rpc::LookupRequest outside;
  outside.set_name("w");
  outside.add_rows(2);
  rpc::LookupResponse looked_up;
  status = ps.call(&rpc::ParameterServer::Stub::Lookup, outside, &looked_up);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("row 2 is outside its 2 rows"), std::string::npos);

  // A malformed tensor: a dtype the protocol does not have.
  rpc::CreateVariableRequest bad_dtype;
  bad_dtype.set_name("v");
  *bad_dtype.mutable_initial() = encode_tensor(torch::ones({2}));
  bad_dtype.mutable_initial()->set_dtype(static_cast<rpc::Tensor::DType>(99));
  status = ps.call(&rpc::ParameterServer::Stub::CreateVariable, bad_dtype, &created);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("variable 'v': unknown tensor dtype 99"), std::string::npos)
      << status.error_message();
}

void expect_refused_slots_leave_no_optimizer(RawPs& ps) {
  // Slots for a variable no update has given an optimizer, with no optimizer named; then
  // Adam slots of the wrong shape. Neither changes the value sent with them.
  rpc::AssignRequest slots;
  slots.set_name("w");
  *slots.mutable_value() = encode_tensor(torch::zeros({2, 2}));
  (*slots.mutable_slots())["exp_avg"] = encode_tensor(torch::zeros({3}));
  rpc::AssignResponse assigned;
  grpc::Status status = ps.call(&rpc::ParameterServer::Stub::Assign, slots, &assigned);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("'w' has no optimizer yet to take slots"),
            std::string::npos)
      << status.error_message();
  slots.mutable_optimizer()->set_kind("Adam");
  (*slots.mutable_optimizer()->mutable_options())["lr"] = 0.001;
  status = ps.call(&rpc::ParameterServer::Stub::Assign, slots, &assigned);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("optimizer slot 'exp_avg' of parameter w is [3]"),
            std::string::npos)
      << status.error_message();
  // The refused slots left no optimizer behind: a later update may still pick any.
  rpc::ReadSlotsRequest which;
  which.set_name("w");
  rpc::ReadSlotsResponse state;
  ASSERT_TRUE(ps.call(&rpc::ParameterServer::Stub::ReadSlots, which, &state).ok());
  EXPECT_EQ(state.kind(), "");
  EXPECT_EQ(state.slots_size(), 0);
}

TEST(ParameterServerServiceTest, BadRequestsGetNamedErrorsAndTheServerKeepsServing) {
  LocalPs cluster(1);
  RawPs ps(cluster.tasks[0].address);
  rpc::CreateVariableRequest create;
  create.set_name("w");
  *create.mutable_initial() = encode_tensor(torch::ones({2, 2}));
  rpc::CreateVariableResponse created;
  ASSERT_TRUE(ps.call(&rpc::ParameterServer::Stub::CreateVariable, create, &created).ok());
  expect_malformed_requests_refused(ps);
  expect_refused_slots_leave_no_optimizer(ps);

  // Nothing changed, and the server still serves.
  rpc::ReadRequest w;
  w.add_names("w");
  rpc::ReadResponse read;
  ASSERT_TRUE(ps.call(&rpc::ParameterServer::Stub::Read, w, &read).ok());
  EXPECT_TRUE(torch::equal(decode_tensor(read.values(0), "w"), torch::ones({2, 2})));
}

TEST(ParameterServerServiceTest, ALostPsIsNamedWithItsAddressWithinTheTimeout) {
  std::vector<Task> tasks{{"ps:0", "127.0.0.1:1"}};  // nothing listens on port 1
  ParameterServers ps(tasks, 500ms);
  const auto start = std::chrono::steady_clock::now();
  try {
    ps.wait_until_ready(500ms, "test");
    FAIL() << "expected a CollectiveError";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("ps:0 (127.0.0.1:1)"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

}  // namespace
}  // namespace dist::ps
