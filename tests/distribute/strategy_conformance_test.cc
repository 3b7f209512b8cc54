// The suite every synchronous Strategy passes. On the same global batches:
//   - its replicas or workers end 20 SGD steps, and 20 Adam steps, with the weights one device
//     reaches (within 1e-5: the sums of several replicas round differently);
//   - a checkpoint written under it after 8 steps, read under every strategy of the list and
//     trained 8 steps more, ends where one device ends from that checkpoint (one test for the
//     whole matrix: StrategyCheckpointMatrixTest);
//   - its checkpoint holds what one device writes, slots included.
// A strategy's own checks run as one case, from one set of worker processes.
// Adding a strategy is adding a line to strategies(): in this process (a Strategy to make), or
// as worker processes (dist_test_worker's "conformance" scenario, on 127.0.0.1).
//
// ParameterServerStrategy is asynchronous (its workers' updates interleave), so it cannot
// equal one device step for step; its checkpoints' portability to Mirrored and no strategy is
// tested in tests/ps.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dist/distribute/local_cluster.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/train/safetensors.h"
#include "equivalence_data.h"
#include "multi_worker/process_group.h"
#include "test_util.h"
#include "train/checkpoint_pieces.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
using testing::ConformanceRun;

struct StrategyUnderTest {
  std::string name;
  // The runs one after another (worker processes start once for all of them); their weights.
  std::function<std::vector<NamedTensors>(const std::vector<ConformanceRun>&)> train_each;

  NamedTensors train(const ConformanceRun& run) const {
    std::vector<NamedTensors> weights = train_each({run});
    return weights.empty() ? NamedTensors{} : weights.front();
  }
};

StrategyUnderTest in_process(std::string name, std::function<Strategy()> make) {
  return {std::move(name), [make](const std::vector<ConformanceRun>& runs) {
            std::vector<NamedTensors> weights;
            for (const auto& run : runs)
              weights.push_back(testing::train_conformance_steps(make(), run));
            return weights;
          }};
}

MirroredOptions devices(int replicas, CrossDeviceOps ops, Sharding sharding = Sharding::kNone) {
  MirroredOptions options;
  options.sharding = sharding;
  for (int r = 0; r < replicas; ++r) options.devices.push_back("cpu:" + std::to_string(r));
  options.cross_device_ops = ops;
  options.threads_per_replica = 1;
  return options;
}

// `workers` processes of `replicas` replicas on 127.0.0.1; `implementation` "auto" (shared
// memory between them) or "ring" (Gloo over TCP); `sharding` "none", "optimizer"...; packs of
// `bytes_per_pack` (0: the default); at stage 3, `reuse_bytes` (empty: the default).
StrategyUnderTest worker_processes(std::string name, int workers, int replicas,
                                   std::string implementation, std::string sharding = "none",
                                   int64_t bytes_per_pack = 0, std::string reuse_bytes = "") {
  return {std::move(name), [=](const std::vector<ConformanceRun>& runs) {
            testing::TempDir dir;
            const std::string out = dir.file("weights.safetensors");
            auto or_dash = [](const std::string& path) { return path.empty() ? "-" : path; };
            std::vector<std::string> args{"conformance", std::to_string(replicas), out};
            for (const auto& run : runs)
              args.insert(args.end(), {run.adam ? "adam" : "sgd", std::to_string(run.from),
                                       std::to_string(run.to), or_dash(run.restore_from),
                                       or_dash(run.save_to)});
            const auto ports = free_loopback_ports(workers);
            testing::WorkerProcesses processes;
            for (int i = 0; i < workers; ++i) {
              std::vector<std::string> env{
                  "TF_CONFIG=" + local_tf_config(ports, i), "DIST_TEST_TIMEOUT_MS=30000",
                  "DIST_TEST_IMPLEMENTATION=" + implementation, "DIST_TEST_SHARDING=" + sharding,
                  "DIST_TEST_BYTES_PER_PACK=" +
                      std::to_string(bytes_per_pack > 0 ? bytes_per_pack : int64_t{25} << 20)};
              if (!reuse_bytes.empty())
                env.push_back("DIST_TEST_SHARDING_REUSE_BYTES=" + reuse_bytes);
              processes.start(DIST_TEST_WORKER_BINARY, args, env);
            }
            std::vector<NamedTensors> weights;
            for (const auto& result : processes.wait_all(120s)) {
              EXPECT_EQ(result.exit_code, 0) << result.output;
              if (result.exit_code != 0) return weights;
            }
            for (size_t i = 0; i < runs.size(); ++i)
              weights.push_back(load_safetensors(out + "." + std::to_string(i)).tensors);
            return weights;
          }};
}

// One line per strategy.
const std::vector<StrategyUnderTest>& strategies() {
  static const std::vector<StrategyUnderTest> all{
      in_process("OneDevice", [] { return Strategy(OneDeviceStrategy("cpu:0")); }),
      in_process("Mirrored2",
                 [] { return MirroredStrategy(devices(2, CrossDeviceOps::kParallelAllReduce)); }),
      in_process("Mirrored3HierarchicalCopy",
                 [] { return MirroredStrategy(devices(3, CrossDeviceOps::kHierarchicalCopy)); }),
      in_process(
          "CentralStorage2",
          [] { return CentralStorageStrategy(devices(2, CrossDeviceOps::kReductionToOneDevice)); }),
      worker_processes("MultiWorker2x2SharedMemory", 2, 2, "auto"),
      worker_processes("MultiWorker3x1Tcp", 3, 1, "ring"),
      // Sharding (sharding.h): packs of 64 KiB, so the CNN's 122k parameters make several,
      // some smaller than a chunk per worker would need to be cut inside a parameter.
      in_process("Mirrored2ShardedOptimizer",
                 [] {
                   return MirroredStrategy(
                       devices(2, CrossDeviceOps::kParallelAllReduce, Sharding::kOptimizer));
                 }),
      worker_processes("MultiWorker2x1ShardedOptimizerTcp", 2, 1, "ring", "optimizer", 64 << 10),
      worker_processes("MultiWorker4x1ShardedGradientsTcp", 4, 1, "ring", "gradients", 64 << 10),
      worker_processes("MultiWorker2x2ShardedGradientsSharedMemory", 2, 2, "auto", "gradients",
                       64 << 10),
      // Stage 3: each parameter a pack. Reuse 0: each layer gathered for its forward and
      // backward; the default keeps this small model whole from forward to backward.
      worker_processes("MultiWorker2x1ShardedParametersTcp", 2, 1, "ring", "parameters", 0, "0"),
      worker_processes("MultiWorker4x1ShardedParametersSharedMemory", 4, 1, "auto", "parameters"),
  };
  return all;
}

NamedTensors one_device(const ConformanceRun& run) {
  return testing::train_conformance_steps(OneDeviceStrategy("cpu:0"), run);
}

void expect_close(const NamedTensors& actual, const NamedTensors& expected,
                  const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  ASSERT_FALSE(expected.empty());
  std::vector<torch::Tensor> a, b;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(actual[i].first, expected[i].first) << what;
    a.push_back(actual[i].second);
    b.push_back(expected[i].second);
  }
  const double diff = testing::max_relative_difference(a, b);
  std::printf("%s: max relative difference %.3g\n", what.c_str(), diff);
  EXPECT_LT(diff, 1e-5) << what;
}

class StrategyConformanceTest : public ::testing::TestWithParam<size_t> {
 protected:
  const StrategyUnderTest& strategy() const { return strategies()[GetParam()]; }
};

// A checkpoint written under each strategy after 8 Adam steps, read under every strategy and
// trained 8 steps more, ends where one device ends from it: every pair of the list. One test,
// grouped by the strategy that continues, so that each set of worker processes starts once and
// continues from every checkpoint in turn: with a set of processes for each pair, their
// start-ups took most of the suite's time for this check (96 sets of processes, now 14).
TEST(StrategyCheckpointMatrixTest, ACheckpointWrittenUnderEachStrategyContinuesUnderEveryStrategy) {
  testing::TempDir dir;
  std::vector<ConformanceRun> continuations;
  std::vector<NamedTensors> expected;
  for (const auto& writer : strategies()) {
    ConformanceRun first;
    first.adam = true;
    first.to = 8;
    first.save_to = dir.file(writer.name + ".safetensors");
    writer.train(first);
    ConformanceRun rest;
    rest.adam = true;
    rest.from = 8;
    rest.to = 16;
    rest.restore_from = first.save_to;
    continuations.push_back(rest);
    expected.push_back(one_device(rest));
  }
  for (const auto& reader : strategies()) {
    const std::vector<NamedTensors> continued = reader.train_each(continuations);
    ASSERT_EQ(continued.size(), continuations.size()) << "continued under " << reader.name;
    for (size_t i = 0; i < continued.size(); ++i)
      expect_close(continued[i], expected[i],
                   "written under " + strategies()[i].name + ", continued under " + reader.name);
  }
}

// What a strategy writes must be what one device writes at the same step, slots included: the
// test above reads one file on both sides, so it cannot see slots that were never written (a
// sharded strategy keeps them in shares, and must gather them first).
// A checkpoint's tensors by name, with those of its pieces (sharding 'parameters') put together.
std::map<std::string, torch::Tensor> tensors_of_checkpoint(const std::string& path) {
  SafetensorsFile file = load_safetensors(path);
  detail::CheckedTensors tensors;
  tensors.tensors.insert(file.tensors.begin(), file.tensors.end());
  if (auto pieces = file.metadata.find("pieces"); pieces != file.metadata.end())
    detail::read_checkpoint_pieces(path,
                                   {std::stoi(pieces->second), std::stoll(file.metadata.at("step")),
                                    file.metadata.at(detail::kCheckpointSave)},
                                   Env::Default(), nullptr, tensors);
  return tensors.tensors;
}

// `written`'s checkpoint (under `name`) holds the tensors one device writes after the same
// steps, Adam's slots included.
void expect_checkpoint_holds_what_one_device_writes(const std::string& name,
                                                    const ConformanceRun& written,
                                                    const testing::TempDir& dir) {
  ConformanceRun reference = written;
  reference.save_to = dir.file("one_device.safetensors");
  one_device(reference);
  const auto mine = tensors_of_checkpoint(written.save_to);
  const auto expected = tensors_of_checkpoint(reference.save_to);
  size_t slots = 0;
  for (const auto& [tensor_name, tensor] : expected)
    if (tensor_name.find("exp_avg_sq") != std::string::npos) ++slots;
  EXPECT_GT(slots, 0u) << "the one-device checkpoint holds no Adam slots";
  NamedTensors floating, reference_floating;
  for (const auto& [tensor_name, tensor] : expected) {
    auto it = mine.find(tensor_name);
    if (it == mine.end()) {
      ADD_FAILURE() << tensor_name << " is not in " << name << "'s checkpoint";
      continue;
    }
    if (!tensor.is_floating_point()) {
      EXPECT_TRUE(torch::equal(it->second, tensor)) << tensor_name;
      continue;
    }
    floating.emplace_back(tensor_name, it->second);
    reference_floating.emplace_back(tensor_name, tensor);
  }
  EXPECT_EQ(mine.size(), expected.size());
  expect_close(floating, reference_floating, name + ", its checkpoint after 8 steps");
}

// Its 20 SGD steps, its 20 Adam steps and its checkpoint after 8 Adam steps, all from one set
// of worker processes (train_each): a set per check made a strategy's start-ups cost more than
// its steps.
TEST_P(StrategyConformanceTest, TwentySgdAndTwentyAdamStepsEqualOneDeviceAndItsCheckpointToo) {
  testing::TempDir dir;
  ConformanceRun sgd;
  ConformanceRun adam;
  adam.adam = true;
  ConformanceRun saved = adam;
  saved.to = 8;
  saved.save_to = dir.file("mine.safetensors");
  const std::vector<NamedTensors> weights = strategy().train_each({sgd, adam, saved});
  ASSERT_EQ(weights.size(), 3u) << strategy().name;
  expect_close(weights[0], one_device(sgd), strategy().name + ", SGD");
  expect_close(weights[1], one_device(adam), strategy().name + ", Adam");
  expect_checkpoint_holds_what_one_device_writes(strategy().name, saved, dir);
}

INSTANTIATE_TEST_SUITE_P(Strategies, StrategyConformanceTest,
                         ::testing::Range(size_t{0}, strategies().size()),
                         [](const auto& info) { return strategies()[info.param].name; });

}  // namespace
}  // namespace dist
