// The table of optimizer kinds: an optimizer's options travel as named numbers and make an
// optimizer of the same kind that steps the same bits (how a ps task applies updates).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "core/optimizer_kinds.h"
#include "dist/core/error.h"

namespace dist {
namespace {

// Each over its own copy of `start`.
std::vector<std::unique_ptr<torch::optim::Optimizer>> one_of_each(const at::Tensor& start) {
  auto p = [&] { return start.clone().requires_grad_(); };
  std::vector<std::unique_ptr<torch::optim::Optimizer>> all;
  all.push_back(std::make_unique<torch::optim::SGD>(
      std::vector<at::Tensor>{p()},
      torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(0.01).nesterov(
          false)));
  all.push_back(std::make_unique<torch::optim::Adam>(std::vector<at::Tensor>{p()},
                                                     torch::optim::AdamOptions(0.01)
                                                         .betas({0.8, 0.95})
                                                         .eps(1e-6)
                                                         .weight_decay(0.1)
                                                         .amsgrad(true)));
  all.push_back(std::make_unique<torch::optim::AdamW>(
      std::vector<at::Tensor>{p()}, torch::optim::AdamWOptions(0.02).betas({0.85, 0.99})));
  all.push_back(std::make_unique<torch::optim::RMSprop>(
      std::vector<at::Tensor>{p()},
      torch::optim::RMSpropOptions(0.01).alpha(0.9).momentum(0.5).centered(true)));
  all.push_back(std::make_unique<torch::optim::Adagrad>(
      std::vector<at::Tensor>{p()},
      torch::optim::AdagradOptions(0.1).lr_decay(0.01).initial_accumulator_value(0.5)));
  return all;
}

// Three steps of `optimizer` over its one parameter with fixed gradients.
at::Tensor three_steps(torch::optim::Optimizer& optimizer) {
  at::Tensor p = optimizer.param_groups()[0].params()[0];
  for (int step = 1; step <= 3; ++step) {
    p.mutable_grad() = torch::linspace(-1, 1, p.numel()).reshape(p.sizes()) * step;
    optimizer.step();
  }
  return p.detach().clone();
}

TEST(OptimizerKindsTest, OptionsAsNamedNumbersMakeAnOptimizerThatStepsTheSameBits) {
  torch::manual_seed(1);
  const at::Tensor start = torch::randn({4, 3});
  const auto originals = one_of_each(start);
  for (const auto& original : originals) {
    const detail::OptimizerKind* kind = detail::OptimizerWithKind(*original).kind;
    ASSERT_NE(kind, nullptr);
    const auto values = kind->read_options(original->param_groups()[0].options());
    at::Tensor copy = start.clone().requires_grad_();
    auto made = kind->make_over({copy}, values);
    EXPECT_EQ(detail::OptimizerWithKind(*made).kind, kind) << kind->name;
    EXPECT_EQ(kind->read_options(made->param_groups()[0].options()), values) << kind->name;
    EXPECT_TRUE(torch::equal(three_steps(*made), three_steps(*original))) << kind->name;
  }
}

TEST(OptimizerKindsTest, WritingSomeOptionsKeepsTheOthers) {
  at::Tensor p = torch::zeros({2}, torch::requires_grad());
  torch::optim::SGD sgd({p}, torch::optim::SGDOptions(0.1).momentum(0.9));
  const detail::OptimizerKind& kind = *detail::find_optimizer_kind("SGD");
  kind.write_options(sgd.param_groups()[0].options(), {{"lr", 0.5}});
  const auto& options =
      static_cast<const torch::optim::SGDOptions&>(sgd.param_groups()[0].options());
  EXPECT_DOUBLE_EQ(options.lr(), 0.5);
  EXPECT_DOUBLE_EQ(options.momentum(), 0.9);
}

TEST(OptimizerKindsTest, UnknownKindsAndMissingRatesAreNamed) {
  EXPECT_EQ(detail::find_optimizer_kind("LBFGS"), nullptr);
  EXPECT_EQ(detail::optimizer_kind_names(), "SGD, AdamW, Adam, RMSprop and Adagrad");
  try {
    detail::find_optimizer_kind("Adam")->make_over({torch::zeros({2})}, {{"beta1", 0.9}});
    FAIL() << "an optimizer was made without a learning rate";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("kind Adam needs a learning rate ('lr')"),
              std::string::npos)
        << e.what();
  }
}

// A user's optimizer that the table does not list.
class Halving : public torch::optim::Optimizer {
 public:
  explicit Halving(std::vector<at::Tensor> params)
      : Optimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                  std::make_unique<torch::optim::SGDOptions>(0.5)) {}
  at::Tensor step(LossClosure) override { return {}; }
};
// A user's class derived from a listed one: of that one's kind.
class MySgd : public torch::optim::SGD {
 public:
  using SGD::SGD;
};

// The kind is remembered by class: every optimizer of a class, the first or a later one, made at
// a dead one's address or not, gets its class's kind, and a class the table does not list none.
TEST(OptimizerKindsTest, EachOptimizerGetsTheKindOfItsClassEveryTime) {
  const std::vector<std::string> names{"SGD", "Adam", "AdamW", "RMSprop", "Adagrad"};
  for (int round = 0; round < 2; ++round) {
    const auto all = one_of_each(torch::zeros({2}));
    for (size_t i = 0; i < all.size(); ++i) {
      const detail::OptimizerKind* kind = detail::OptimizerWithKind(*all[i]).kind;
      ASSERT_NE(kind, nullptr) << names[i];
      EXPECT_EQ(kind->name, names[i]) << "round " << round;
    }
    for (int k = 0; k < 2; ++k) {  // the same stack slot, a listed class and then another
      Halving own({torch::zeros({2}, torch::requires_grad())});
      EXPECT_EQ(detail::OptimizerWithKind(own).kind, nullptr);
      MySgd mine({torch::zeros({2}, torch::requires_grad())}, torch::optim::SGDOptions(0.1));
      ASSERT_NE(detail::OptimizerWithKind(mine).kind, nullptr);
      EXPECT_STREQ(detail::OptimizerWithKind(mine).kind->name, "SGD");
    }
  }
}

}  // namespace
}  // namespace dist
