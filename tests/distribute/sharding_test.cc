// Sharding's options in one process: names, refusals, and what a sharded Mirrored strategy does
// with the optimizer's slots (they live with the strategy; a checkpoint gathers them). Its
// equivalence to one device is the strategy conformance suite's (Mirrored2ShardedOptimizer and
// the multi-worker lines); real worker processes are tests/tools/dist_train_sharding_test.cc.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/data/dataset.h"
#include "dist/distribute/gradient_compression.h"
#include "dist/distribute/layered_module.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/distribute/sharding.h"
#include "dist/keras/functional.h"
#include "dist/train/checkpoint.h"
#include "dist/train/safetensors.h"
#include "equivalence_data.h"
#include "test_util.h"

namespace dist {
namespace {

MirroredOptions one_replica(Sharding sharding) {
  MirroredOptions options;
  options.devices = {"cpu:0"};
  options.threads_per_replica = 1;
  options.sharding = sharding;
  return options;
}

MirroredOptions two_replicas(Sharding sharding) {
  MirroredOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.threads_per_replica = 1;
  options.sharding = sharding;
  return options;
}

// One step of 2 examples on each replica: the sum of the outputs, its gradients applied.
template <typename Model>
void take_step(const Strategy& strategy, Model& model, MirroredOptimizer& optimizer) {
  strategy.run(
      [&](const data::Element&) {
        model->forward(torch::ones({2, 8})).sum().backward();
        optimizer.apply_gradients();
      },
      data::Element{torch::zeros({4, 1})});
}

TEST(ShardingTest, NamesAreParsedAndBadOnesNamed) {
  for (Sharding s :
       {Sharding::kNone, Sharding::kOptimizer, Sharding::kGradients, Sharding::kParameters})
    EXPECT_EQ(parse_sharding(to_string(s)), s);
  try {
    parse_sharding("zero3");
    ADD_FAILURE() << "zero3 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'zero3'"), std::string::npos) << e.what();
  }
}

TEST(ShardingTest, WhatCollidesIsRefusedByName) {
  MirroredOptions with_hook = two_replicas(Sharding::kOptimizer);
  with_hook.communication_hook = gradient_compression("bf16");
  try {
    MirroredStrategy strategy(with_hook);
    ADD_FAILURE() << "sharding with a hook was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'bf16'"), std::string::npos) << e.what();
  }
}

// The optimizer object keeps no slots between sharded steps; a checkpoint written then holds
// them all the same (gathered), and a state read back into the optimizer is taken by the next
// step (the optimizer is empty again).
TEST(ShardingTest, TheStrategyKeepsTheSlotsAndACheckpointStillHoldsThem) {
  testing::TempDir dir;
  MirroredStrategy strategy(two_replicas(Sharding::kGradients));
  torch::manual_seed(3);
  auto model = strategy.mirror(torch::nn::Sequential(torch::nn::Linear(8, 4)));
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-2));
  auto step = [&] { take_step(strategy, model, *optimizer); };
  step();
  EXPECT_TRUE(optimizer->optimizer().state().empty());
  Checkpoint checkpoint(model, optimizer.get());
  checkpoint.write(dir.file("ckpt.safetensors"));  // one worker: it gathers alone
  size_t moments = 0;
  for (const auto& [name, tensor] : load_safetensors(dir.file("ckpt.safetensors")).tensors)
    moments += name.find("exp_avg") != std::string::npos;
  EXPECT_EQ(moments, 4u);  // exp_avg and exp_avg_sq of the weight and the bias
  checkpoint.read(dir.file("ckpt.safetensors"));
  EXPECT_FALSE(optimizer->optimizer().state().empty());
  step();
  EXPECT_TRUE(optimizer->optimizer().state().empty());
}

// Its chunk optimizers are cut at the first step: a parameter group added later is refused, not
// silently left unstepped.
TEST(ShardingTest, AParameterGroupAddedAfterTheFirstStepIsRefused) {
  MirroredStrategy strategy(two_replicas(Sharding::kOptimizer));
  auto model = strategy.mirror(torch::nn::Sequential(torch::nn::Linear(8, 4)));
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  auto step = [&] { take_step(strategy, model, *optimizer); };
  step();
  optimizer->optimizer().add_param_group(
      torch::optim::OptimizerParamGroup({torch::zeros({2}, torch::requires_grad())}));
  try {
    step();
    ADD_FAILURE() << "a step with a new parameter group ran";
  } catch (const Error& e) {  // raised inside the step's collective: every replica fails
    EXPECT_NE(std::string(e.what()).find("parameter groups changed"), std::string::npos)
        << e.what();
  }
}

// Its chunk optimizers are of the first step's kind: a step of an optimizer of another kind over
// the same model is refused by name, not run by the first kind's chunk optimizers with its
// options.
TEST(ShardingTest, AnOptimizerOfAnotherKindAfterTheFirstStepIsRefused) {
  MirroredStrategy strategy(two_replicas(Sharding::kOptimizer));
  auto model = strategy.mirror(torch::nn::Sequential(torch::nn::Linear(8, 4)));
  auto sgd = strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  take_step(strategy, model, *sgd);
  auto adam = strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-2));
  try {
    take_step(strategy, model, *adam);
    ADD_FAILURE() << "an Adam step ran on the chunk optimizers of an SGD";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("are SGD (the first step's kind), but this step's "
                                         "optimizer is Adam"),
              std::string::npos)
        << e.what();
  }
}

TEST(ShardingTest, StageThreeRefusesWhatItCannotShardByName) {
  try {
    MirroredStrategy strategy(two_replicas(Sharding::kParameters));
    ADD_FAILURE() << "stage 3 with two replicas per worker was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("one replica"), std::string::npos) << e.what();
  }
  for (const auto& [sharding, reuse] : {std::pair{Sharding::kParameters, int64_t{-2}},
                                        std::pair{Sharding::kGradients, int64_t{-1}}}) {
    MirroredOptions options = one_replica(sharding);
    options.sharding_reuse_bytes = reuse;
    try {
      MirroredStrategy strategy(options);
      ADD_FAILURE() << "sharding_reuse_bytes " << reuse << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("sharding_reuse_bytes " + std::to_string(reuse)),
                std::string::npos)
          << e.what();
    }
  }
  MirroredStrategy strategy(one_replica(Sharding::kParameters));
  try {
    strategy.mirror(torch::nn::Linear(8, 4));
    ADD_FAILURE() << "stage 3 of a model that is no Sequential was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("torch::nn::Sequential"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("dist::LayeredModule"), std::string::npos) << e.what();
  }
  auto shared = torch::nn::Linear(8, 8);
  try {
    strategy.mirror(torch::nn::Sequential(shared, torch::nn::ReLU(), shared));
    ADD_FAILURE() << "stage 3 of a Sequential sharing a layer was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("shared weights"), std::string::npos) << e.what();
  }
  torch::nn::Sequential placed(torch::nn::Linear(8, 4));
  strategy.mirror(placed);
  MirroredStrategy another(one_replica(Sharding::kParameters));
  try {
    another.mirror(placed);
    ADD_FAILURE() << "a model placed at stage 3 was placed again";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("place a model once"), std::string::npos) << e.what();
  }
}

template <typename Module>
std::vector<torch::Tensor> values_of(Mirrored<Module>& model) {
  model.variables().gather_values();  // a collective of one here
  std::vector<torch::Tensor> values;
  for (const auto& p : model.primary()->parameters()) values.push_back(p.detach().clone());
  return values;
}

// Stage 3 in one worker: between steps every parameter is an empty tensor (its chunk, here the
// whole of it, lives with the strategy), evaluation included; gather_values makes them whole;
// the steps are one device's, and a checkpoint written between them continues where they do.
TEST(ShardingTest, StageThreeKeepsParametersInChunksAndStepsAsOneDevice) {
  testing::TempDir dir;
  auto train = [&](const Strategy& strategy, bool sharded) {
    torch::manual_seed(3);
    auto model = strategy.mirror(
        torch::nn::Sequential(torch::nn::Linear(8, 6), torch::nn::ReLU(), torch::nn::Linear(6, 4)));
    auto optimizer =
        strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-2));
    auto released = [&] {
      for (const auto& p : model.primary()->parameters())
        if (p.numel() != 0) return false;
      return true;
    };
    take_step(strategy, model, *optimizer);
    take_step(strategy, model, *optimizer);
    EXPECT_EQ(released(), sharded);
    {
      torch::NoGradGuard evaluating;
      EXPECT_EQ(model->forward(torch::ones({1, 8})).sizes(), (std::vector<int64_t>{1, 4}));
    }
    EXPECT_EQ(released(), sharded);
    Checkpoint checkpoint(model, optimizer.get());
    checkpoint.write(dir.file("step2.safetensors"));  // stage 3: in pieces, here one
    take_step(strategy, model, *optimizer);
    const auto third = values_of(model);
    {
      torch::NoGradGuard evaluating;
      model->forward(torch::ones({1, 8}));  // releases what values_of gathered
    }
    checkpoint.read(dir.file("step2.safetensors"));
    EXPECT_EQ(released(), sharded);  // each worker took its share: nothing was gathered
    take_step(strategy, model, *optimizer);
    EXPECT_EQ(released(), sharded);
    const auto again = values_of(model);
    EXPECT_EQ(testing::max_relative_difference(again, third), 0.0);
    return third;
  };
  const auto sharded = train(MirroredStrategy(one_replica(Sharding::kParameters)), true);
  const auto whole = train(OneDeviceStrategy("cpu:0"), false);
  EXPECT_LT(testing::max_relative_difference(sharded, whole), 1e-6);
}

// A read at stage 3 checks the file's shapes against the whole parameters' (released here),
// and changes nothing when one differs.
TEST(ShardingTest, StageThreeReadChecksWholeShapesAndChangesNothingOnAMismatch) {
  testing::TempDir dir;
  torch::manual_seed(3);
  auto other = torch::nn::Sequential(torch::nn::Linear(8, 5), torch::nn::Linear(5, 4));
  Checkpoint(other.ptr(), nullptr).write(dir.file("other.safetensors"));
  MirroredStrategy strategy(one_replica(Sharding::kParameters));
  auto model =
      strategy.mirror(torch::nn::Sequential(torch::nn::Linear(8, 6), torch::nn::Linear(6, 4)));
  const auto before = values_of(model);
  {
    torch::NoGradGuard evaluating;
    model->forward(torch::ones({1, 8}));  // releases them again (one worker gathers alone)
  }
  ASSERT_EQ(model.primary()->parameters()[0].numel(), 0);
  Checkpoint checkpoint(model, nullptr);
  try {
    checkpoint.read(dir.file("other.safetensors"));
    FAIL() << "a checkpoint of another model was read";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("is [5, 8] Float but the model has [6, 8] Float"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(testing::max_relative_difference(values_of(model), before), 0.0);
}

// A model of a user's own, no Sequential: a skip connection around its first layer, and its
// two layers named to the strategy as a dist::LayeredModule.
struct SkipNetImpl : torch::nn::Cloneable<SkipNetImpl>, LayeredModule {
  SkipNetImpl() { reset(); }
  void reset() override {
    first = register_module("first", torch::nn::Linear(8, 8));
    last = register_module("last", torch::nn::Linear(8, 4));
  }
  at::Tensor forward(const at::Tensor& x) {
    before_layer(0);
    at::Tensor h = torch::relu(first->forward(x)) + x;
    after_layer(0, h);
    before_layer(1);
    at::Tensor y = last->forward(h);
    after_layer(1, y);
    return y;
  }
  std::vector<std::vector<at::Tensor>> layer_parameters() override {
    return {first->parameters(), last->parameters()};
  }
  torch::nn::Linear first{nullptr}, last{nullptr};
};
TORCH_MODULE(SkipNet);

// Stage 3 gathers a LayeredModule's layers as a Sequential's children: released between steps,
// whole while they compute, and the steps one device's.
TEST(ShardingTest, StageThreeGathersTheLayersALayeredModuleNames) {
  auto train = [&](const Strategy& strategy) {
    torch::manual_seed(3);
    auto model = strategy.mirror(SkipNet());
    auto optimizer =
        strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-2));
    for (int step = 0; step < 3; ++step) take_step(strategy, model, *optimizer);
    const bool released =
        model.primary()->first->weight.numel() == 0 && model.primary()->last->weight.numel() == 0;
    return std::make_pair(released, values_of(model));
  };
  const auto [released, sharded] = train(MirroredStrategy(one_replica(Sharding::kParameters)));
  const auto [kept, whole] = train(OneDeviceStrategy("cpu:0"));
  EXPECT_TRUE(released);
  EXPECT_FALSE(kept);
  ASSERT_EQ(sharded.size(), 4U);
  EXPECT_LT(testing::max_relative_difference(sharded, whole), 1e-6);
  // A copy (clone()) computes with its own parameters: the hooks stay with the placed model.
  MirroredStrategy strategy(one_replica(Sharding::kParameters));
  auto placed = strategy.mirror(SkipNet());
  EXPECT_TRUE(placed.primary()->has_layer_hooks());
  EXPECT_FALSE(
      std::dynamic_pointer_cast<SkipNetImpl>(placed.primary()->clone())->has_layer_hooks());
}

TEST(ShardingTest, StageThreeRefusesAKerasLayerCalledTwiceOrAModelPlacedTwice) {
  using namespace keras;  // NOLINT(google-build-using-namespace): layer names
  MirroredStrategy strategy(one_replica(Sharding::kParameters));
  KerasTensor input = Input({8});
  layers::Dense shared(8);
  try {
    strategy.mirror(Functional(input, shared(shared(input))));
    ADD_FAILURE() << "stage 3 of a Keras layer called twice was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("shared weights"), std::string::npos) << e.what();
  }
  Functional placed(input, layers::Dense(4)(layers::Dense(8)(input)));
  strategy.mirror(placed);
  MirroredStrategy another(one_replica(Sharding::kParameters));
  try {
    another.mirror(placed);
    ADD_FAILURE() << "a Keras model placed at stage 3 was placed again";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("place a model once"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dist
