// ParameterServerStrategy and ClusterCoordinator in one process: what they refuse, by name.
// The jobs of real processes are in ps_job_test.cc.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/distribute/cluster_coordinator.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/distribute/parameter_server_strategy.h"
#include "test_util.h"

namespace dist {
namespace {

ParameterServerOptions options_for(const std::string& tf_config) {
  ParameterServerOptions options;
  options.cluster = parse_tf_config(tf_config);
  return options;
}

const char* kCluster = R"("cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"],
                                       "ps": ["127.0.0.1:3"]})";

std::string config(const std::string& type) {
  return std::string("{") + kCluster + R"(, "task": {"type": ")" + type + R"(", "index": 0}})";
}

TEST(ParameterServerStrategyTest, ClustersItCannotRunAreRefusedByName) {
  EXPECT_NE(
      testing::message_of<InvalidArgument>([] {
        ParameterServerStrategy(options_for(
            R"({"cluster": {"chief": ["a:1"], "worker": ["a:2"]}, "task": {"type": "chief", "index": 0}})"));
      }).find("the cluster has no ps task"),
      std::string::npos);
  EXPECT_NE(
      testing::message_of<InvalidArgument>([] {
        ParameterServerStrategy(options_for(
            R"({"cluster": {"worker": ["a:2"], "ps": ["a:3"]}, "task": {"type": "worker", "index": 0}})"));
      }).find("the cluster has no chief"),
      std::string::npos);
  EXPECT_NE(
      testing::message_of<InvalidArgument>([] {
        ParameterServerStrategy(options_for(
            R"({"cluster": {"chief": ["a:1"], "ps": ["a:3"]}, "task": {"type": "chief", "index": 0}})"));
      }).find("no worker to run steps"),
      std::string::npos);
  EXPECT_NE(testing::message_of<InvalidArgument>([] {
              auto options = options_for(config("chief"));
              options.rpc_timeout = std::chrono::milliseconds(0);
              ParameterServerStrategy strategy(options);
            }).find("every timeout must be positive"),
            std::string::npos);
}

TEST(ParameterServerStrategyTest, RolesComeFromTheTask) {
  for (const std::string type : {"chief", "worker", "ps"}) {
    ParameterServerStrategy strategy(options_for(config(type)));
    EXPECT_EQ(strategy.task_type(), type);
    EXPECT_EQ(strategy.is_chief(), type == "chief");
    EXPECT_EQ(strategy.name(), "parameter_server");
    EXPECT_EQ(strategy.num_replicas_in_sync(), 1);
  }
}

// Without contacting any other task: a worker places variables but creates none, and the
// coordinator's API refuses misuse by name.
TEST(ParameterServerStrategyTest, CoordinatorRefusesMisuseByName) {
  EXPECT_NE(testing::message_of<InvalidArgument>([] {
              ClusterCoordinator coordinator(OneDeviceStrategy{});
            }).find("a coordinator schedules steps of a ParameterServerStrategy only"),
            std::string::npos);

  ParameterServerStrategy worker(options_for(config("worker")));
  auto model = worker.mirror(torch::nn::Linear(3, 2));
  ClusterCoordinator coordinator(worker);
  coordinator.register_function("step", [](ScheduledCall&) { return torch::zeros({1}); });
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              coordinator.register_function("step",
                                            [](ScheduledCall&) { return torch::zeros({1}); });
            }).find("a step function 'step' is registered already"),
            std::string::npos);
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              coordinator.schedule("step");
            }).find("only the chief schedules steps"),
            std::string::npos);
  EXPECT_NE(testing::message_of<InvalidArgument>([] {
              RemoteValue().fetch();
            }).find("not returned by ClusterCoordinator::schedule"),
            std::string::npos);
  EXPECT_NE(testing::message_of<InvalidArgument>([] {
              ScheduledCall().next();
            }).find("not a call scheduled by a coordinator"),
            std::string::npos);

  ParameterServerStrategy ps(options_for(config("ps")));
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              ps.run([] {});
            }).find("ps:0 (127.0.0.1:3) is a ps task, which runs no steps"),
            std::string::npos);
}

TEST(ParameterServerStrategyTest, ChiefSchedulesOnlyRegisteredFunctions) {
  auto options = options_for(config("chief"));
  // No task of kCluster ever serves. With the default 2 minutes, the coordinator's shutdown waits
  // 15 s for worker:0 to start serving; at 2 s no time to start is left, so it does not (the
  // body takes milliseconds, far below the 2 s after which no worker answering is an error).
  options.startup_timeout = std::chrono::seconds(2);
  ParameterServerStrategy chief(options);
  ClusterCoordinator coordinator(chief);
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              coordinator.schedule("missing");
            }).find("no step function 'missing' is registered"),
            std::string::npos);
  EXPECT_NE(
      testing::message_of<InvalidArgument>([&] { coordinator.serve(); }).find("is the coordinator"),
      std::string::npos);
  EXPECT_TRUE(coordinator.done());
}

}  // namespace
}  // namespace dist
