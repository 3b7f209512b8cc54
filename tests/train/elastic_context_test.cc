// ElasticContext's calls for a loop that counts its own steps (dist/train/elastic.h: step_done in
// parts, as dist-train's pipelined loop and keras::callbacks::Elastic use them), on a one-worker
// elastic job in this process: its store host is the built dist-store-host, as for any job.
// The multi-worker paths (losses, joins, the restore) are tests/tools/dist_train_elastic_test.cc
// and tests/train/elastic_example_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/distribute/cluster_spec.h"
#include "dist/distribute/local_cluster.h"
#include "dist/train/checkpoint.h"
#include "dist/train/elastic.h"
#include "multi_worker/process_group.h"
#include "test_util.h"

namespace dist {
namespace {

using namespace std::chrono_literals;

ElasticOptions one_worker_job(int port, int64_t commit_every) {
  ElasticOptions options;
  options.commit_every = commit_every;
  options.cluster = parse_tf_config(local_tf_config({port}, 0));
  options.rendezvous_timeout = 30s;
  return options;
}

TEST(ElasticContextTest, ALoopThatCountsItsOwnStepsCommitsAtTheBoundariesItPeeks) {
  const int port = free_loopback_ports(1)[0];
  std::vector<int64_t> boundaries;
  std::string said, carried;
  bool restored = true, regrouped = true;
  const ElasticResult result = run_elastic(one_worker_job(port, 3), [&](ElasticContext& elastic) {
    EXPECT_THROW(elastic.commit(), InvalidArgument);  // before track: nothing to commit
    Strategy& strategy = elastic.strategy();
    auto model = strategy.mirror(torch::nn::Sequential(torch::nn::Linear(2, 1)));
    auto optimizer =
        strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
    Checkpoint state(model, optimizer.get());
    std::ostringstream out;
    restored = elastic.track(state, out);  // the job's first generation: no commit to read
    elastic.set_resumed_at_step(40);       // as if the loop had loaded its own checkpoint
    for (int64_t step = 41; step <= 47; ++step) {
      elastic.step_completed(step);
      if (!elastic.boundary_due(step)) continue;
      state.state.step = step;
      state.state.position = {0, step - 40};
      elastic.commit();
      regrouped = elastic.regroup_now(/*stopping=*/false);
      boundaries.push_back(step);
    }
    carried = state.state.values["elastic.resumed_at_step"];
    said = out.str();
    elastic.set_end({47, /*interrupted=*/true});
  });
  EXPECT_FALSE(restored);
  EXPECT_FALSE(regrouped);  // nobody waits to join
  EXPECT_EQ(boundaries, (std::vector<int64_t>{42, 45}));
  EXPECT_EQ(carried, "40");  // every commit carries the step the job resumed from
  EXPECT_EQ(said, "");       // no resize, so no recovery to say
  EXPECT_TRUE(result.took_part);
  EXPECT_TRUE(result.chief);
  EXPECT_EQ(result.worker_sizes, std::vector<int>{1});
  EXPECT_EQ(result.end.steps, 47);
  EXPECT_TRUE(result.end.interrupted);
  EXPECT_TRUE(testing::wait_until_store_host_gone(port, 20s));
}

TEST(ElasticContextTest, ATrainingFunctionThatNeverMadeItsStrategyIsNamed) {
  const int port = free_loopback_ports(1)[0];
  try {
    run_elastic(one_worker_job(port, 1), [](ElasticContext&) {});
    FAIL() << "a generation that took no part was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(testing::contains(e.what(), "generation 0"));
    EXPECT_TRUE(testing::contains(e.what(), "call ElasticContext::strategy() (or track)"))
        << e.what();
  }
  EXPECT_TRUE(testing::wait_until_store_host_gone(port, 20s));
}

}  // namespace
}  // namespace dist
