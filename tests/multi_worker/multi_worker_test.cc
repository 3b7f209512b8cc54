// MultiWorkerMirroredStrategy with real worker processes on 127.0.0.1 (see worker_main.cc).
// Every test is bounded: workers that outlive the test's timeout are killed. Failures and
// TF_CONFIG: multi_worker_failures_test.cc.
#include <gtest/gtest.h>

#include <torch/torch.h>
#include <limits>
#include <map>

#include "collective/factory.h"
#include "dist/distribute/local_cluster.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/train/safetensors.h"
#include "distribute/reduction/gradient_reducer.h"
#include "equivalence_data.h"
#include "keras/keras_test_models.h"
#include "multi_worker/process_group.h"
#include "test_util.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::all_output;
using testing::WorkerProcesses;

// Starts `workers` worker processes running `args` with TF_CONFIG for worker:i.
// Workers on 127.0.0.1: their collectives go through shared memory (kAuto), or with
// `implementation` "ring" through Gloo over TCP.
void start_workers(WorkerProcesses& processes, int workers, const std::vector<std::string>& args,
                   int timeout_ms = 20000, const std::string& implementation = "auto",
                   const std::string& sharding = "none") {
  auto ports = free_loopback_ports(workers);
  for (int i = 0; i < workers; ++i)
    processes.start(
        DIST_TEST_WORKER_BINARY, args,
        {"TF_CONFIG=" + local_tf_config(ports, i),
         "DIST_TEST_TIMEOUT_MS=" + std::to_string(timeout_ms),
         "DIST_TEST_IMPLEMENTATION=" + implementation, "DIST_TEST_SHARDING=" + sharding});
}

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

void expect_bit_identical(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second))
        << a[i].first << " differs by " << (a[i].second - b[i].second).abs().max().item<double>()
        << " of " << b[i].second.abs().max().item<double>();
  }
}

struct Shape {
  int workers;
  int replicas;
};

// The max relative difference between the tensors a worker saved in `path` and `expected`,
// which must have the same names in the same order (a failure, and infinity, otherwise).
double relative_difference_of_file(const std::string& path, const NamedTensors& expected) {
  auto saved = load_safetensors(path);
  EXPECT_EQ(saved.tensors.size(), expected.size());
  if (saved.tensors.size() != expected.size()) return std::numeric_limits<double>::infinity();
  std::vector<torch::Tensor> a, b;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(saved.tensors[i].first, expected[i].first);
    a.push_back(saved.tensors[i].second);
    b.push_back(expected[i].second);
  }
  return testing::max_relative_difference(a, b);
}

class MultiWorkerEquivalenceTest : public ::testing::TestWithParam<Shape> {};

// `workers` processes of `replicas` replicas each train the equivalence steps (SGD, 20 steps)
// and end with the weights one device reaches on the same global batches.
void expect_workers_reproduce_one_device(int workers, int replicas, int timeout_ms) {
  testing::TempDir dir;
  WorkerProcesses processes;
  start_workers(processes, workers,
                {"equivalence", std::to_string(replicas), dir.file("w.safetensors")}, timeout_ms);
  auto results = processes.wait_all(std::chrono::milliseconds(timeout_ms) + 100s);
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << all_output(results);

  auto expected = testing::train_equivalence_steps(OneDeviceStrategy());
  const double diff = relative_difference_of_file(dir.file("w.safetensors"), expected);
  std::printf("%d workers x %d replicas: max relative difference %.3g\n", workers, replicas, diff);
  EXPECT_LT(diff, 1e-5);
}

// The CycleGAN step (four models, four optimizers, each model's gradients from its own loss)
// on 2 workers x 1 replica equals one device. Over TCP ("ring") the reduction overlaps
// backward (OverlappedReducer: a generator's loss reaching a discriminator would be a gradient
// accumulated twice); over shared memory it runs after backward.
TEST(MultiWorkerTest, CycleGanStepOfTwoWorkersEqualsOneDevice) {
  const std::pair<std::string, std::string> runs[] = {
      {"adam", "ring"}, {"sgd", "ring"}, {"adam", "auto"}};
  for (const auto& [optimizer, implementation] : runs) {
    SCOPED_TRACE(optimizer + " over " + implementation);
    testing::TempDir dir;
    WorkerProcesses processes;
    start_workers(processes, 2, {"cyclegan", optimizer, dir.file("gan.safetensors")}, 60000,
                  implementation);
    auto results = processes.wait_all(160s);
    for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << all_output(results);
    auto expected = testing::train_cyclegan_steps(OneDeviceStrategy(), optimizer == "adam");
    const double diff = relative_difference_of_file(dir.file("gan.safetensors"), expected);
    std::printf("CycleGAN, 2 workers, %s over %s: max relative difference %.3g\n",
                optimizer.c_str(), implementation.c_str(), diff);
    EXPECT_LT(diff, optimizer == "adam" ? 1e-4 : 1e-5);
  }
}

// dist_test_worker `scenario` OUT on 2 workers x 2 replicas over Gloo's ring, gradient packs
// sent during backward: the chief's tensors are `expected`, name by name, within 1e-5.
void expect_overlapped_workers_reproduce(const std::string& scenario, const NamedTensors& expected,
                                         const std::string& what) {
  testing::TempDir dir;
  WorkerProcesses processes;
  start_workers(processes, 2, {scenario, dir.file("w.safetensors")}, 30000, "ring");
  auto results = processes.wait_all(130s);
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << all_output(results);
  const auto saved = load_safetensors(dir.file("w.safetensors")).tensors;
  ASSERT_EQ(saved.size(), expected.size());
  double worst = 0;
  for (size_t i = 0; i < saved.size(); ++i) {
    EXPECT_EQ(saved[i].first, expected[i].first);
    const double d = testing::max_relative_difference({saved[i].second}, {expected[i].second});
    EXPECT_LT(d, 1e-5) << saved[i].first;
    worst = std::max(worst, d);
  }
  std::printf("2 workers x 2 replicas, %s: max relative difference %.3g\n", what.c_str(), worst);
}

// A layer that all-reduces in forward and backward (the gradient of ReplicaContext::all_reduce)
// on 2 workers x 2 replicas, gradient packs sent during backward: one device's weights.
TEST(MultiWorkerTest, ALayerThatAllReducesInBackwardEqualsOneDevice) {
  expect_overlapped_workers_reproduce("centering",
                                      testing::train_global_centering_steps(OneDeviceStrategy()),
                                      "all-reduce in backward");
}

TEST_P(MultiWorkerEquivalenceTest, WorkersReproduceOneDeviceWeights) {
  const auto [workers, replicas] = GetParam();
  expect_workers_reproduce_one_device(workers, replicas, 20000);
}

// World size 16 on loopback: 8 worker processes x 2 replicas on this machine's cores. Label
// "long" (tests/CMakeLists.txt runs LongMultiWorkerTest apart from the unit tests).
TEST(LongMultiWorkerTest, EightWorkersOfTwoReplicasReproduceOneDeviceWeights) {
  expect_workers_reproduce_one_device(8, 2, 300000);
}

// keras_batchnorm_fit (a residual block with batch norm) on 2 workers of one replica at
// `sharding`: each worker's weights and statistics equal those of 1 process of 2 replicas.
void expect_two_workers_fit_as_two_replicas(const std::string& sharding) {
  testing::TempDir dir;
  WorkerProcesses processes;
  start_workers(processes, 2, {"batchnorm", dir.file("w")}, 20000, "auto", sharding);
  auto results = processes.wait_all(120s);
  for (const auto& r : results) {
    ASSERT_EQ(r.exit_code, 0) << all_output(results);
    // The residual model has 10 parameters (2 convolutions, 2 batch norms, 1 dense).
    const std::string released =
        sharding == "parameters" ? "released 10 of 10" : "released 0 of 10";
    EXPECT_NE(r.output.find(released), std::string::npos) << r.output;
  }
  auto expected = testing::keras_batchnorm_fit(MirroredStrategy({"cpu:0", "cpu:1"})).weights();
  for (const char* rank : {"0", "1"}) {
    auto saved = load_safetensors(dir.file(std::string("w.") + rank)).tensors;
    ASSERT_EQ(saved.size(), expected.size());
    bool has_moving_mean = false;
    for (size_t i = 0; i < saved.size(); ++i) {
      EXPECT_EQ(saved[i].first, expected[i].first);
      has_moving_mean |= saved[i].first.find("running_mean") != std::string::npos;
      EXPECT_LT(testing::max_relative_difference({saved[i].second}, {expected[i].second}), 1e-5)
          << "worker " << rank << ": " << saved[i].first;
    }
    EXPECT_TRUE(has_moving_mean);
  }
}

// Batch norm statistics are averaged over every replica of every worker after each step, so
// 2 workers x 1 replica hold the same statistics (and weights) as 1 process x 2 replicas.
TEST(MultiWorkerTest, BatchNormStatisticsAreAveragedAcrossWorkers) {
  expect_two_workers_fit_as_two_replicas("none");
}

// The same fit at sharding 'parameters': the Keras model's layers (a residual branch among
// them) are gathered one at a time (keras::Functional is a LayeredModule), each worker keeping
// half of every parameter between steps, and reach the same weights.
TEST(MultiWorkerTest, AKerasModelWithAResidualBranchFitsAtStageThree) {
  expect_two_workers_fit_as_two_replicas("parameters");
}

// Synchronized batch norm on 2 workers x 2 replicas: the statistics of the global batch, so
// every worker ends with one device's weights and moving statistics.
TEST(MultiWorkerTest, SynchronizedBatchNormOnTwoWorkersOfTwoReplicasFitsAsOneDevice) {
  testing::TempDir dir;
  WorkerProcesses processes;
  start_workers(processes, 2, {"sync_batchnorm", "2", dir.file("w")});
  auto results = processes.wait_all(120s);
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << all_output(results);
  auto expected = testing::keras_batchnorm_fit(OneDeviceStrategy("cpu:0"), true).weights();
  for (const char* rank : {"0", "2"}) {  // each worker's first replica id
    auto saved = load_safetensors(dir.file(std::string("w.") + rank)).tensors;
    ASSERT_EQ(saved.size(), expected.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      EXPECT_EQ(saved[i].first, expected[i].first);
      EXPECT_LT(testing::max_relative_difference({saved[i].second}, {expected[i].second}), 1e-5)
          << "worker " << rank << ": " << saved[i].first;
    }
  }
}

// SyncBatchNorm modules (convert_sync_batchnorm) in a custom loop on 2 workers x 2 replicas,
// gradient packs sent during backward, the last global batch of 3 leaving a replica empty: one
// device's first-step outputs and gradients, weights after 20 steps and moving statistics.
TEST(MultiWorkerTest, SyncBatchNormModulesOnTwoWorkersOfTwoReplicasTrainAsOneDevice) {
  expect_overlapped_workers_reproduce("sync_batchnorm_module",
                                      testing::train_batch_norm_steps(OneDeviceStrategy()),
                                      "SyncBatchNorm modules");
}

// At stage 3 the callbacks that read weights gather them on every worker first: ModelCheckpoint
// writes each epoch's, and EarlyStopping keeps the best and sets them back when it stops.
TEST(MultiWorkerTest, KerasCallbacksReadAndRestoreWeightsAtStageThree) {
  testing::TempDir dir;
  WorkerProcesses processes;
  start_workers(processes, 2, {"stopped_fit", dir.path()}, 20000, "auto", "parameters");
  auto results = processes.wait_all(120s);
  for (const auto& r : results) {
    ASSERT_EQ(r.exit_code, 0) << all_output(results);
    EXPECT_NE(r.output.find("stopped after epoch 1"), std::string::npos) << r.output;
  }
  EXPECT_EQ(testing::files_in(dir.path()), (std::vector<std::string>{"epoch1", "epoch2", "final"}));
  expect_bit_identical(load_safetensors(dir.file("final")).tensors,
                       load_safetensors(dir.file("epoch1")).tensors);
  auto values = [&](const std::string& name) {
    std::vector<torch::Tensor> out;
    for (const auto& [key, tensor] : load_safetensors(dir.file(name)).tensors)
      out.push_back(tensor);
    return out;
  };
  const double moved = testing::max_relative_difference(values("epoch2"), values("epoch1"));
  EXPECT_GT(moved, 0.0);  // the second epoch trained: the restore went back
}

INSTANTIATE_TEST_SUITE_P(MultiWorker, MultiWorkerEquivalenceTest,
                         ::testing::Values(Shape{2, 1},
                                           Shape{3, 2}),  // 2x2, 3x1: StrategyConformanceTest
                         [](const auto& info) {
                           return std::to_string(info.param.workers) + "Workers" +
                                  std::to_string(info.param.replicas) + "Replicas";
                         });

// Overlapping each pack's all-reduce with backward changes when the sums happen, not what is
// summed or in which order: the weights must equal reducing after backward bit for bit. Small
// packs (4 KB) make the tutorial CNN travel in several packs; 3 workers make the ring
// all-reduce's order matter.
TEST(MultiWorkerTest, OverlapWithBackwardIsBitIdenticalToReducingAfterBackward) {
  testing::TempDir dir;
  std::map<std::string, NamedTensors> weights;
  for (std::string reduce : {"overlap", "after_backward"}) {
    WorkerProcesses processes;
    // Over TCP: in shared memory the reduction always runs after backward.
    start_workers(processes, 3,
                  {"equivalence", "2", dir.file(reduce + ".safetensors"), "4096", reduce}, 20000,
                  "ring");
    auto results = processes.wait_all(120s);
    for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << all_output(results);
    weights[reduce] = load_safetensors(dir.file(reduce + ".safetensors")).tensors;
  }
  expect_bit_identical(weights["overlap"], weights["after_backward"]);
}

// One replica per worker, gradients in several packs: each pack's parameters are stepped as
// its sums land (Adam, once its first step has made the slots), bit-identical to the whole step
// after every pack is reduced; so too when the workers first tried to share one copy of the
// variables (the model is large enough to split between them) and found over TCP that they
// cannot.
TEST(MultiWorkerTest, SteppingEachPackAsItLandsIsBitIdenticalToTheWholeStep) {
  testing::TempDir dir;
  const size_t packs = make_packs(testing::make_equivalence_mlp()->parameters(), 4096).size();
  ASSERT_GE(packs, 2u);
  const std::string by_packs = "last step: by " + std::to_string(packs) + " packs";
  struct Run {
    std::string reduce, variables, last_step;
  };
  std::map<std::string, NamedTensors> weights;
  for (const Run& run : {Run{"after_backward", "own", "last step: whole"},
                         Run{"overlap", "own", by_packs}, Run{"overlap", "shared", by_packs}}) {
    const std::string name = run.reduce + "." + run.variables;
    WorkerProcesses processes;
    start_workers(processes, 2,
                  {"step_by_packs", dir.file(name + ".safetensors"), run.reduce, run.variables},
                  20000, "ring");
    auto results = processes.wait_all(120s);
    for (const auto& r : results) {
      ASSERT_EQ(r.exit_code, 0) << all_output(results);
      EXPECT_NE(r.output.find(run.last_step), std::string::npos) << name << ": " << r.output;
    }
    weights[name] = load_safetensors(dir.file(name + ".safetensors")).tensors;
  }
  expect_bit_identical(weights["overlap.own"], weights["after_backward.own"]);
  expect_bit_identical(weights["overlap.shared"], weights["after_backward.own"]);
}

TEST(MultiWorkerTest, CollectivesOnIntegerDataAreExactForWorldSizes1To4) {
  for (int workers = 1; workers <= 4; ++workers) {
    WorkerProcesses processes;
    start_workers(processes, workers, {"collectives", workers == 3 ? "2" : "1"});
    auto results = processes.wait_all(60s);
    for (const auto& r : results) {
      ASSERT_EQ(r.exit_code, 0) << all_output(results);
      EXPECT_NE(r.output.find("collectives exact"), std::string::npos) << r.output;
    }
  }
}

TEST(MultiWorkerTest, CollectivesOverTcpOnOneHostAreExactToo) {
  for (int workers : {2, 3}) {
    WorkerProcesses processes;
    start_workers(processes, workers, {"collectives", "2"}, 20000, "ring");
    auto results = processes.wait_all(60s);
    for (const auto& r : results) {
      ASSERT_EQ(r.exit_code, 0) << all_output(results);
      EXPECT_NE(r.output.find("collectives exact"), std::string::npos) << r.output;
    }
  }
}

// Two workers run the input_steps scenario (worker_main.cc) on inputs of `rows_of_worker_0`
// and `rows_of_worker_1` rows in global batches of 4: both must succeed and print `sizes`.
void expect_global_batches(const std::string& rows_of_worker_0, const std::string& rows_of_worker_1,
                           const std::string& sizes) {
  WorkerProcesses processes;
  start_workers(processes, 2, {"input_steps", rows_of_worker_0, rows_of_worker_1}, 20000, "ring");
  auto results = processes.wait_all(60s);
  for (const auto& r : results) {
    ASSERT_EQ(r.exit_code, 0) << all_output(results);
    EXPECT_NE(r.output.find("global batches " + sizes + "\n"), std::string::npos) << r.output;
  }
}

// Global batches that every worker reads alike (same number of batches): the workers agree on
// that once, at the epoch's first step, and no later step takes a collective. Worker 0 finishes
// its epoch before a collective that worker 1 issues after its first step; were there an
// agreement before each step, worker 0's second step would meet that collective and fail.
TEST(MultiWorkerTest, StepsOfInputsOfEqualLengthTakeNoCollectiveAfterTheFirst) {
  expect_global_batches("10", "10", "4,4,2");
}

// Inputs of different lengths (10 and 14 rows in global batches of 4) agree before every step:
// each step's global batch is the rows the workers hold together, and the epoch ends for both
// when neither has data.
TEST(MultiWorkerTest, InputsOfDifferentLengthsAgreeBeforeEveryStep) {
  expect_global_batches("10", "14", "4,4,3,1");
}

// Shared memory and TCP are two transports of the same sums: with 2 workers (where a + b is
// b + a) the trained weights are equal bit for bit.
TEST(MultiWorkerTest, SharedMemoryAndTcpTrainTheSameWeightsBitForBit) {
  testing::TempDir dir;
  std::map<std::string, NamedTensors> weights;
  for (std::string implementation : {"auto", "ring"}) {
    WorkerProcesses processes;
    start_workers(processes, 2, {"equivalence", "1", dir.file(implementation + ".safetensors")},
                  20000, implementation);
    auto results = processes.wait_all(120s);
    for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << all_output(results);
    weights[implementation] = load_safetensors(dir.file(implementation + ".safetensors")).tensors;
  }
  expect_bit_identical(weights["auto"], weights["ring"]);
}

// Workers of one host keep one copy of the parameters and Adam's slots in shared memory and
// split each step between them (HostSharedVariables): the same bits as each worker stepping its
// own copy, through a restore of an older checkpoint (parameters written by every worker after
// taking its own copy, new slot storage; all shared again at the next step) and with 2
// replicas per worker (4 shares).
TEST(MultiWorkerTest, WorkersSharingVariablesTrainTheSameBitsAsPrivateCopies) {
  for (const std::string replicas : {"1", "2"}) {
    testing::TempDir dir;
    std::map<std::string, NamedTensors> saved;
    for (const std::string mode : {"on", "off"}) {
      WorkerProcesses processes;
      const std::string out = dir.file(mode + ".safetensors");
      start_workers(processes, 2, {"shared_variables", mode, replicas, out});
      auto results = processes.wait_all(120s);
      for (const auto& r : results) {
        ASSERT_EQ(r.exit_code, 0) << all_output(results);
        EXPECT_NE(r.output.find(std::string("parameters and slots in shared memory: ") +
                                (mode == "on" ? "yes" : "no")),
                  std::string::npos)
            << r.output;
      }
      saved[mode] = load_safetensors(out).tensors;
    }
    ASSERT_GT(saved["on"].size(), 6u);  // weights and biases, and their slots
    expect_bit_identical(saved["on"], saved["off"]);
  }
}

// Code every worker runs that changes a shared parameter in place changes the one copy once per
// worker: the next step refuses it on every worker, by name, instead of training on.
TEST(MultiWorkerTest, InPlaceChangesToSharedVariablesOutsideAStepAreRefused) {
  testing::TempDir dir;
  WorkerProcesses processes;
  start_workers(processes, 2, {"shared_variables", "write_in_place", "1", dir.file("w")});
  auto results = processes.wait_all(120s);
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 1) << all_output(results);
    EXPECT_NE(r.output.find("changed in place outside apply_gradients"), std::string::npos)
        << r.output;
  }
}

}  // namespace
}  // namespace dist
