// The data and training loop of the equivalence tests (N replicas vs one device), shared by
// the in-process tests and the multi-worker test processes so both train on the same batches.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/modules/container/sequential.h>
#include <torch/types.h>

#include "dist/data/dataset.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/distribute/strategy.h"

namespace dist::testing {

// 193 examples in global batches of 10: 19 full batches and a last batch of 3 (smaller than
// 4 replicas); 10 is not divisible by 3, 4 or 6. So 20 steps cover uneven splits, a partial
// batch and empty replicas.
data::Dataset equivalence_data();

// An MLP for equivalence_data()'s images: Flatten, 784-200 (ReLU), 200-10; 159,010 parameters,
// enough to split a step between two workers (OptimizerShards' minimum).
torch::nn::Sequential make_equivalence_mlp();

// One pass of equivalence_data() (20 steps) of `model` under `strategy`; returns the primary
// copy's named parameters. `after_backward` (optional) runs in each replica between backward
// and apply_gradients, with the replica's loss.
std::vector<std::pair<std::string, torch::Tensor>> train_one_pass(
    const Strategy& strategy, const Mirrored<torch::nn::Sequential>& model,
    MirroredOptimizer& optimizer,
    const std::function<void(const torch::Tensor&)>& after_backward = nullptr);

// 20 steps of the tutorial CNN (seed 7) with SGD(0.1) or Adam(1e-3) over equivalence_data()
// under `strategy`; returns the primary copy's named parameters. `after_backward` (optional)
// runs in each replica between backward and apply_gradients, with the replica's loss.
std::vector<std::pair<std::string, torch::Tensor>> train_equivalence_steps(
    const Strategy& strategy, bool adam = false,
    const std::function<void(const torch::Tensor&)>& after_backward = nullptr);

// Steps [from, to) of the tutorial CNN (seed 7) with SGD(0.1) or Adam(1e-3) over
// equivalence_data() under `strategy`, as train_equivalence_steps for 0 and 20; with
// `restore_from`, after reading that checkpoint (its data position wins over `from`); with
// `save_to`, the chief writes a checkpoint there after the last step. The strategy
// conformance suite's run (tests/distribute/strategy_conformance_test.cc).
struct ConformanceRun {
  bool adam = false;
  int from = 0;
  int to = 20;
  std::string restore_from;
  std::string save_to;
};
std::vector<std::pair<std::string, torch::Tensor>> train_conformance_steps(
    const Strategy& strategy, const ConformanceRun& run);

// `steps` CycleGAN steps (dist::models::CycleGan with 16x16 images, seed 11, dropout on) over
// random domains X and Y in global batches of 6 (12 examples: the steps wrap around) under
// `strategy`; SGD(0.01) or Adam(2e-4). Returns the primary copies' parameters of all four
// models, named "<model>.<parameter>", and the last step's summed losses as "loss/<key>".
std::vector<std::pair<std::string, torch::Tensor>> train_cyclegan_steps(const Strategy& strategy,
                                                                        bool adam, int steps = 3);

// 20 SGD(0.1) steps (seed 5) over equivalence_data() of an MLP 784-16-10 whose hidden layer is
// centered on its mean over the whole global batch, every replica's rows: a layer that
// all-reduces in forward and, through ReplicaContext::all_reduce's gradient, in backward.
// Returns the primary copy's named parameters.
std::vector<std::pair<std::string, torch::Tensor>> train_global_centering_steps(
    const Strategy& strategy);

// `steps` (at most 20) SGD(0.01) steps (seed 9) over equivalence_data() of a small CNN with batch
// normalization over channels (after a convolution) and over features (after a Dense): BatchNorm2d
// and BatchNorm1d, made SyncBatchNorm by convert_sync_batchnorm when `synchronized`. Returns the
// primary copy's parameters and moving statistics after the last step, "gradient/<name>": the
// first step's gradients ((before - after) / learning rate), and "output/first_step": the
// first step's training-mode outputs of every replica, gathered in global-batch order.
std::vector<std::pair<std::string, torch::Tensor>> train_batch_norm_steps(const Strategy& strategy,
                                                                          bool synchronized = true,
                                                                          int steps = 20);

// One worker (127.0.0.1) of two replicas whose gradient packs (64 bytes: a tensor or two each)
// are all-reduced during backward, through the same hooks and cross-process stage as a real
// job; collectives time out after 20 s.
MultiWorkerMirroredStrategy overlapped_one_worker();

// max over tensors of ||a - b|| / ||b||.
double max_relative_difference(const std::vector<torch::Tensor>& a,
                               const std::vector<torch::Tensor>& b);

}  // namespace dist::testing
