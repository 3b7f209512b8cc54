// The objects the named-checkpoint tests save and restore (gan_checkpoint_objects.h).
#include "train/gan_checkpoint_objects.h"

#include <c10/util/string_utils.h>
#include <gtest/gtest.h>

#include "dist/distribute/replica_context.h"
#include "dist/train/loss.h"

namespace dist::gan_checkpoint {

Sequential generator(int seed, int width) {
  torch::manual_seed(seed);
  return Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(2, width, 3).padding(1)),
                    torch::nn::BatchNorm2d(width), torch::nn::Functional(torch::relu),
                    torch::nn::Conv2d(width, 2, 1));
}

Sequential discriminator(int seed) {
  torch::manual_seed(seed);
  // 2x6x6 -> 4x2x2 -> 16 -> 1
  return Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 4, 3).stride(2)),
                    torch::nn::Functional(torch::leaky_relu, 0.2), torch::nn::Flatten(),
                    torch::nn::Linear(16, 1));
}

Gan::Gan(int seed)
    : generator_g(generator(seed)),
      generator_f(generator(seed + 1)),
      discriminator_x(discriminator(seed + 2)),
      discriminator_y(discriminator(seed + 3)),
      lambda(torch::tensor(10.0 + seed)) {
  const double lr = 1e-2 * (1 + seed % 3);  // restored from the file
  generator_g_optimizer = std::make_unique<torch::optim::Adam>(
      generator_g->parameters(), torch::optim::AdamOptions(lr).betas({0.5, 0.999}));
  generator_f_optimizer = std::make_unique<torch::optim::Adam>(
      generator_f->parameters(), torch::optim::AdamOptions(lr).betas({0.5, 0.999}));
  discriminator_x_optimizer = std::make_unique<torch::optim::Adam>(
      discriminator_x->parameters(), torch::optim::AdamOptions(lr).amsgrad(true));
  discriminator_y_optimizer = std::make_unique<torch::optim::Adam>(discriminator_y->parameters(),
                                                                   torch::optim::AdamOptions(lr));
}

Checkpoint Gan::checkpoint_except(const std::set<std::string>& left_out) {
  Checkpoint ckpt;
  auto model = [&](const char* name, const Sequential& m) {
    if (left_out.count(name) == 0) ckpt.add(name, m);
  };
  auto optimizer = [&](const char* name, const std::unique_ptr<torch::optim::Adam>& o) {
    if (left_out.count(name) == 0) ckpt.add(name, o.get());
  };
  model("generator_g", generator_g);
  model("generator_f", generator_f);
  model("discriminator_x", discriminator_x);
  model("discriminator_y", discriminator_y);
  optimizer("generator_g_optimizer", generator_g_optimizer);
  optimizer("generator_f_optimizer", generator_f_optimizer);
  optimizer("discriminator_x_optimizer", discriminator_x_optimizer);
  optimizer("discriminator_y_optimizer", discriminator_y_optimizer);
  if (left_out.count("lambda") == 0) ckpt.add("lambda", lambda);
  return ckpt;
}

std::vector<torch::optim::Optimizer*> Gan::optimizers() const {
  return {generator_g_optimizer.get(), generator_f_optimizer.get(), discriminator_x_optimizer.get(),
          discriminator_y_optimizer.get()};
}

void Gan::train(int steps) {
  for (int i = 0; i < steps; ++i) {
    auto x = torch::randn({3, 2, 6, 6});  // from the generator the checkpoint restores
    auto y = torch::randn({3, 2, 6, 6});
    for (auto* o : optimizers()) o->zero_grad();
    auto fake_y = generator_g->forward(x);
    auto fake_x = generator_f->forward(y);
    auto cycled_x = generator_f->forward(fake_y);
    auto cycled_y = generator_g->forward(fake_x);
    auto cycle = (cycled_x - x).abs().mean() + (cycled_y - y).abs().mean();
    auto generator_loss = -discriminator_y->forward(fake_y).mean() -
                          discriminator_x->forward(fake_x).mean() + lambda * cycle;
    generator_loss.backward();
    generator_g_optimizer->step();
    generator_f_optimizer->step();
    for (auto* o : optimizers()) o->zero_grad();
    auto discriminator_loss =
        discriminator_x->forward(fake_x.detach()).mean() - discriminator_x->forward(x).mean() +
        discriminator_y->forward(fake_y.detach()).mean() - discriminator_y->forward(y).mean();
    discriminator_loss.backward();
    discriminator_x_optimizer->step();
    discriminator_y_optimizer->step();
  }
}

// Every value of a module: parameters, then buffers.
std::vector<torch::Tensor> values_of(const torch::nn::Module& module) {
  std::vector<torch::Tensor> all;
  for (const auto& p : module.parameters()) all.push_back(p.detach().clone());
  for (const auto& b : module.buffers()) all.push_back(b.clone());
  return all;
}

// An Adam optimizer's state in parameter order: step (as a tensor), exp_avg, exp_avg_sq,
// max_exp_avg_sq (undefined without amsgrad); an empty list for a parameter without state.
std::vector<torch::Tensor> adam_state(const torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> all;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      auto it = optimizer.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
      if (it == optimizer.state().end()) {
        all.push_back(torch::Tensor());
        continue;
      }
      const auto& s = static_cast<const torch::optim::AdamParamState&>(*it->second);
      all.push_back(torch::tensor(s.step(), torch::kLong));
      all.push_back(s.exp_avg().clone());
      all.push_back(s.exp_avg_sq().clone());
      all.push_back(s.max_exp_avg_sq().defined() ? s.max_exp_avg_sq().clone() : torch::Tensor());
    }
    all.push_back(torch::tensor(group.options().get_lr(), torch::kDouble));
  }
  return all;
}

// Everything a Gan holds, in a fixed order.
std::vector<torch::Tensor> everything(const Gan& gan) {
  std::vector<torch::Tensor> all;
  for (const auto* m : {gan.generator_g.ptr().get(), gan.generator_f.ptr().get(),
                        gan.discriminator_x.ptr().get(), gan.discriminator_y.ptr().get()}) {
    auto v = values_of(*m);
    all.insert(all.end(), v.begin(), v.end());
  }
  for (const auto* o : gan.optimizers()) {
    auto v = adam_state(*o);
    all.insert(all.end(), v.begin(), v.end());
  }
  all.push_back(gan.lambda.clone());
  return all;
}

// Bit for bit (an undefined tensor equals only an undefined one).
void expect_identical(const std::vector<torch::Tensor>& actual,
                      const std::vector<torch::Tensor>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_EQ(actual[i].defined(), expected[i].defined()) << i;
    if (!actual[i].defined()) continue;
    EXPECT_EQ(actual[i].scalar_type(), expected[i].scalar_type()) << i;
    EXPECT_TRUE(torch::equal(actual[i], expected[i])) << i;
  }
}

bool differs(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].defined() && b[i].defined() && !torch::equal(a[i], b[i])) return true;
  return false;
}

MirroredPair::MirroredPair(const Strategy& strategy, int seed)
    : generator_g(strategy.mirror(generator(seed))),
      discriminator_x(strategy.mirror(discriminator(seed + 1))),
      generator_g_optimizer(strategy.mirror_optimizer<torch::optim::Adam>(
          generator_g, torch::optim::AdamOptions(1e-2))),
      discriminator_x_optimizer(strategy.mirror_optimizer<torch::optim::Adam>(
          discriminator_x, torch::optim::AdamOptions(2e-2))),
      lambda(torch::tensor({1.0f, 2.0f, 3.0f})) {}

Checkpoint MirroredPair::checkpoint() {
  Checkpoint ckpt;
  ckpt.add("generator_g", generator_g)
      .add("discriminator_x", discriminator_x)
      .add("generator_g_optimizer", generator_g_optimizer)
      .add("discriminator_x_optimizer", discriminator_x_optimizer.get())
      .add("lambda", lambda);
  return ckpt;
}

void MirroredPair::train(const Strategy& strategy, int steps) {
  const int n = strategy.num_replicas_in_sync();
  const int64_t global_batch = 6;
  ASSERT_EQ(global_batch % n, 0);
  for (int step = 0; step < steps; ++step) {
    strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      const int64_t local = global_batch / n;
      auto x = torch::arange(local * r * 72, local * (r + 1) * 72, torch::kFloat)
                   .reshape({local, 2, 6, 6})
                   .sin() *
               (1 + step);
      auto fake = generator_g->forward(x);
      auto per_example =
          discriminator_x->forward(fake).squeeze(1) + (fake - x).abs().flatten(1).mean(1);
      compute_average_loss(per_example, global_batch).backward();
      generator_g_optimizer->apply_gradients();
      discriminator_x_optimizer->apply_gradients();
    });
  }
}

std::vector<torch::Tensor> everything(MirroredPair& pair) {
  std::vector<torch::Tensor> all = values_of(*pair.generator_g.primary());
  for (auto& v : values_of(*pair.discriminator_x.primary())) all.push_back(v);
  for (auto& v : adam_state(pair.generator_g_optimizer->optimizer())) all.push_back(v);
  for (auto& v : adam_state(pair.discriminator_x_optimizer->optimizer())) all.push_back(v);
  all.push_back(pair.lambda.clone());
  return all;
}

}  // namespace dist::gan_checkpoint
