// Checkpoints of named objects (tf.train.Checkpoint(generator_g=..., ...)): a CycleGAN's four
// models, four optimizers and a tensor round trip bit for bit, across replica counts and into
// no strategy; files of Checkpoint(model, optimizer), old and new, read either way; every
// mismatch and damage is named and changes nothing.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/string_utils.h>

#include <filesystem>
#include <functional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "dist/core/error.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/replica_context.h"
#include "dist/train/checkpoint.h"
#include "dist/train/loss.h"
#include "dist/train/safetensors.h"
#include "test_util.h"
#include "train/checkpoint_checksums.h"

namespace dist {
namespace {

using torch::nn::Sequential;

Sequential generator(int seed, int width = 4) {
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

// CycleGAN's objects: generators G (x to y) and F (y to x), discriminators of x and y, an Adam
// optimizer for each, and the cycle loss weight as a tensor.
struct Gan {
  explicit Gan(int seed)
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

  Checkpoint checkpoint() { return checkpoint_except({}); }

  // Every object but those named in `left_out` (for the caller to add something else in
  // their place), models before optimizers.
  Checkpoint checkpoint_except(const std::set<std::string>& left_out) {
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

  std::vector<torch::optim::Optimizer*> optimizers() const {
    return {generator_g_optimizer.get(), generator_f_optimizer.get(),
            discriminator_x_optimizer.get(), discriminator_y_optimizer.get()};
  }

  void train(int steps) {
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

  Sequential generator_g, generator_f, discriminator_x, discriminator_y;
  std::unique_ptr<torch::optim::Adam> generator_g_optimizer, generator_f_optimizer,
      discriminator_x_optimizer, discriminator_y_optimizer;
  torch::Tensor lambda;
};

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

TEST(NamedCheckpointTest, FourModelsFourAdamsAndATensorRoundTripAndContinueBitForBit) {
  testing::TempDir dir;
  Gan gan(1);
  gan.train(3);
  Checkpoint saved = gan.checkpoint();
  saved.state.step = 3;
  saved.write(dir.file("gan.safetensors"));
  const auto at_save = everything(gan);
  gan.train(2);
  const auto expected = everything(gan);

  Gan fresh(2);  // other initial values, learning rates and lambda; no optimizer state yet
  torch::manual_seed(99);  // another generator state, to be restored
  ASSERT_TRUE(differs(everything(fresh), at_save));
  const torch::Tensor lambda = fresh.lambda;  // restored in place: the same tensor
  Checkpoint restored = fresh.checkpoint();
  restored.read(dir.file("gan.safetensors"));
  EXPECT_EQ(restored.state.step, 3);
  expect_identical(everything(fresh), at_save);
  EXPECT_EQ(lambda.item<double>(), 11.0);
  fresh.train(2);
  expect_identical(everything(fresh), expected);

  // The file names each object's tensors after it, and lists the objects.
  auto file = load_safetensors(dir.file("gan.safetensors"));
  EXPECT_EQ(file.tensors.front().first, "generator_g/0.weight");
  EXPECT_EQ(file.metadata.at("object/generator_g"), "model");
  EXPECT_EQ(file.metadata.at("object/discriminator_y_optimizer"), "optimizer");
  EXPECT_EQ(file.metadata.at("object/discriminator_y_optimizer/class"), "Adam");
  EXPECT_EQ(file.metadata.at("object/discriminator_y_optimizer/model"), "discriminator_y");
  EXPECT_EQ(file.metadata.at("object/lambda"), "tensor");
  std::set<std::string> names;
  for (const auto& [name, t] : file.tensors) names.insert(name);
  EXPECT_EQ(names.count("discriminator_x_optimizer/3.bias/max_exp_avg_sq"), 1u);
  EXPECT_EQ(names.count("generator_f/1.running_mean"), 1u);
  EXPECT_EQ(names.count("lambda"), 1u);
  EXPECT_EQ(file.metadata.count("optimizer"), 0u);  // only Checkpoint(model, optimizer)'s
}

TEST(NamedCheckpointTest, ObjectsAreFoundWhicheverWayTheyAreAdded) {
  // Shared pointers, a model name given explicitly, the order of optimizers and models.
  testing::TempDir dir;
  Gan gan(1);
  gan.train(2);
  Checkpoint saved;
  saved.add("generator_g", gan.generator_g.ptr())
      .add("generator_g_optimizer", gan.generator_g_optimizer.get(), "generator_g")
      .add("discriminator_x",
           std::static_pointer_cast<torch::nn::Module>(gan.discriminator_x.ptr()))
      .add("discriminator_x_optimizer", gan.discriminator_x_optimizer.get());
  saved.write(dir.file("c.safetensors"));
  EXPECT_EQ(saved.names(),
            (std::vector<std::string>{"generator_g", "generator_g_optimizer", "discriminator_x",
                                      "discriminator_x_optimizer"}));
  Gan fresh(4);
  Checkpoint restored;
  restored.add("discriminator_x", fresh.discriminator_x)
      .add("generator_g", fresh.generator_g)
      .add("discriminator_x_optimizer", fresh.discriminator_x_optimizer.get())
      .add("generator_g_optimizer", fresh.generator_g_optimizer.get());
  restored.read(dir.file("c.safetensors"));
  expect_identical(values_of(*fresh.generator_g), values_of(*gan.generator_g));
  expect_identical(values_of(*fresh.discriminator_x), values_of(*gan.discriminator_x));
  expect_identical(adam_state(*fresh.generator_g_optimizer),
                   adam_state(*gan.generator_g_optimizer));
  expect_identical(adam_state(*fresh.discriminator_x_optimizer),
                   adam_state(*gan.discriminator_x_optimizer));
}

// ---- across strategies -------------------------------------------------------------------------

MirroredStrategy replicas(int n) {
  MirroredOptions options;
  for (int r = 0; r < n; ++r) options.devices.push_back("cpu:" + std::to_string(r));
  options.threads_per_replica = 1;
  return MirroredStrategy(options);
}

// A generator and a discriminator mirrored by `strategy`, each with an Adam optimizer.
struct MirroredPair {
  explicit MirroredPair(const Strategy& strategy, int seed)
      : generator_g(strategy.mirror(generator(seed))),
        discriminator_x(strategy.mirror(discriminator(seed + 1))),
        generator_g_optimizer(strategy.mirror_optimizer<torch::optim::Adam>(
            generator_g, torch::optim::AdamOptions(1e-2))),
        discriminator_x_optimizer(strategy.mirror_optimizer<torch::optim::Adam>(
            discriminator_x, torch::optim::AdamOptions(2e-2))),
        lambda(torch::tensor({1.0f, 2.0f, 3.0f})) {}

  Checkpoint checkpoint() {
    Checkpoint ckpt;
    ckpt.add("generator_g", generator_g)
        .add("discriminator_x", discriminator_x)
        .add("generator_g_optimizer", generator_g_optimizer)
        .add("discriminator_x_optimizer", discriminator_x_optimizer.get())
        .add("lambda", lambda);
    return ckpt;
  }

  // Each replica's batch depends on its id only: the same global batch for any replica count.
  void train(const Strategy& strategy, int steps) {
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

  Mirrored<Sequential> generator_g, discriminator_x;
  std::shared_ptr<MirroredOptimizer> generator_g_optimizer, discriminator_x_optimizer;
  torch::Tensor lambda;
};

std::vector<torch::Tensor> everything(MirroredPair& pair) {
  std::vector<torch::Tensor> all = values_of(*pair.generator_g.primary());
  for (auto& v : values_of(*pair.discriminator_x.primary())) all.push_back(v);
  for (auto& v : adam_state(pair.generator_g_optimizer->optimizer())) all.push_back(v);
  for (auto& v : adam_state(pair.discriminator_x_optimizer->optimizer())) all.push_back(v);
  all.push_back(pair.lambda.clone());
  return all;
}

TEST(NamedCheckpointTest, WrittenWithTwoReplicasReadsIntoNoStrategyAndThreeReplicas) {
  testing::TempDir dir;
  const auto two = replicas(2);
  MirroredPair saved(two, 1);
  saved.train(two, 3);
  saved.lambda.mul_(-1);
  saved.checkpoint().write(dir.file("two.safetensors"));
  const auto expected = everything(saved);

  // No strategy: plain modules and LibTorch optimizers under the same names.
  auto generator_g = generator(7);
  auto discriminator_x = discriminator(8);
  torch::optim::Adam generator_g_optimizer(generator_g->parameters(),
                                           torch::optim::AdamOptions(0.5));
  torch::optim::Adam discriminator_x_optimizer(discriminator_x->parameters(),
                                               torch::optim::AdamOptions(0.5));
  auto lambda = torch::zeros({3});
  Checkpoint plain;
  plain.add("generator_g", generator_g)
      .add("discriminator_x", discriminator_x)
      .add("generator_g_optimizer", &generator_g_optimizer)
      .add("discriminator_x_optimizer", &discriminator_x_optimizer)
      .add("lambda", lambda);
  plain.read(dir.file("two.safetensors"));
  std::vector<torch::Tensor> actual = values_of(*generator_g);
  for (auto& v : values_of(*discriminator_x)) actual.push_back(v);
  for (auto& v : adam_state(generator_g_optimizer)) actual.push_back(v);
  for (auto& v : adam_state(discriminator_x_optimizer)) actual.push_back(v);
  actual.push_back(lambda);
  expect_identical(actual, expected);

  // Three replicas: every replica's copy holds the values (buffers are per copy).
  const auto three = replicas(3);
  MirroredPair restored(three, 5);
  restored.checkpoint().read(dir.file("two.safetensors"));
  expect_identical(everything(restored), expected);
  for (const auto& copy : restored.generator_g.replicas())
    expect_identical(values_of(*copy), values_of(*saved.generator_g.primary()));

  // Written again with three replicas, read with two: the same file contents.
  restored.checkpoint().write(dir.file("three.safetensors"));
  MirroredPair again(two, 9);
  again.checkpoint().read(dir.file("three.safetensors"));
  expect_identical(everything(again), expected);

  // Training continues bit for bit from the round trip through three replicas.
  saved.train(two, 2);
  again.train(two, 2);
  expect_identical(everything(again), everything(saved));
}

// ---- the files of Checkpoint(model, optimizer)
// ---------------------------------------------------

// Rewrites a checkpoint's metadata through `edit`, then seals it again as Checkpoint::write
// does, so only the edit differs.
void edit_metadata(const std::string& path,
                   const std::function<void(std::map<std::string, std::string>&)>& edit) {
  SafetensorsFile file = load_safetensors(path);
  edit(file.metadata);
  dist::detail::seal_checkpoint(file.tensors, file.metadata);
  save_safetensors(path, file.tensors, file.metadata);
}

// A file as Checkpoint(model, optimizer) wrote it before named objects: no "object/" entries.
void make_old_style(const std::string& path) {
  edit_metadata(path, [](std::map<std::string, std::string>& meta) {
    for (auto it = meta.begin(); it != meta.end();)
      it = it->first.rfind("object/", 0) == 0 ? meta.erase(it) : std::next(it);
  });
}

TEST(NamedCheckpointTest, TheFilesOfCheckpointModelOptimizerAreTheObjectsModelAndOptimizer) {
  testing::TempDir dir;
  auto model = generator(1);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.03));
  for (int i = 0; i < 2; ++i) {
    adam.zero_grad();
    model->forward(torch::randn({2, 2, 6, 6})).square().mean().backward();
    adam.step();
  }
  const auto values = values_of(*model);
  const auto slots = adam_state(adam);
  Checkpoint(model.ptr(), &adam).write(dir.file("old_api.safetensors"));
  std::filesystem::copy_file(dir.file("old_api.safetensors"), dir.file("old_format.safetensors"));
  make_old_style(dir.file("old_format.safetensors"));
  // Read by earlier versions: the entries they look for are still written.
  const auto meta = load_safetensors(dir.file("old_api.safetensors")).metadata;
  EXPECT_EQ(meta.at("optimizer"), "Adam");
  EXPECT_EQ(meta.at("optimizer.lr/0"), "0.029999999999999999");
  EXPECT_EQ(load_safetensors(dir.file("old_format.safetensors")).metadata.count("object/model"),
            0u);

  for (const char* name : {"old_api.safetensors", "old_format.safetensors"}) {
    SCOPED_TRACE(name);
    auto other = generator(2);
    torch::optim::Adam other_adam(other->parameters(), torch::optim::AdamOptions(0.5));
    Checkpoint named;
    named.add("model", other).add("optimizer", &other_adam);
    named.read(dir.file(name));
    expect_identical(values_of(*other), values);
    expect_identical(adam_state(other_adam), slots);
  }

  // And the other way: named "model" and "optimizer", read by Checkpoint(model, optimizer).
  Checkpoint named;
  named.add("model", model).add("optimizer", &adam);
  named.write(dir.file("named.safetensors"));
  auto other = generator(3);
  torch::optim::Adam other_adam(other->parameters(), torch::optim::AdamOptions(0.5));
  Checkpoint(other.ptr(), &other_adam).read(dir.file("named.safetensors"));
  expect_identical(values_of(*other), values);
  expect_identical(adam_state(other_adam), slots);

  // A model alone reads the model of a file with optimizer state, as it always has.
  auto alone = generator(4);
  Checkpoint(alone.ptr(), nullptr).read(dir.file("old_format.safetensors"));
  expect_identical(values_of(*alone), values);
}

// ---- mistakes
// ------------------------------------------------------------------------------------

void expect_invalid(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an InvalidArgument";
  } catch (const InvalidArgument& e) {
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(NamedCheckpointTest, BadNamesAndOptimizersWithoutTheirModelAreRefusedByName) {
  Gan gan(1);
  Checkpoint ckpt;
  ckpt.add("generator_g", gan.generator_g);
  expect_invalid([&] { ckpt.add("generator_g", gan.generator_f); },
                 {"'generator_g'", "already added"});
  expect_invalid([&] { ckpt.add("generator/f", gan.generator_f); }, {"'generator/f'", "'/'"});
  expect_invalid([&] { ckpt.add("", gan.generator_f); }, {"empty"});
  expect_invalid([&] { ckpt.add("rng", gan.lambda); }, {"'rng'", "reserved"});
  expect_invalid([&] { ckpt.add("__metadata__", gan.lambda); }, {"'__metadata__'", "reserved"});
  expect_invalid([&] { ckpt.add("lambda", torch::Tensor()); }, {"'lambda'", "undefined"});
  // The optimizer of a model not added (yet).
  expect_invalid([&] { ckpt.add("generator_f_optimizer", gan.generator_f_optimizer.get()); },
                 {"'generator_f_optimizer'", "add its model first"});
  expect_invalid(
      [&] { ckpt.add("generator_f_optimizer", gan.generator_f_optimizer.get(), "generator_f"); },
      {"'generator_f'", "'generator_f_optimizer'", "add the model first"});
  expect_invalid(
      [&] { ckpt.add("generator_f_optimizer", gan.generator_f_optimizer.get(), "generator_g"); },
      {"'generator_f_optimizer'", "not in model 'generator_g'"});
  const auto two = replicas(2);
  MirroredPair pair(two, 1);
  expect_invalid([&] { ckpt.add("mirrored_optimizer", pair.generator_g_optimizer); },
                 {"'mirrored_optimizer'", "add its model"});
  // A parameter group added after the optimizer was: refused when written.
  ckpt.add("generator_g_optimizer", gan.generator_g_optimizer.get());
  gan.generator_g_optimizer->add_param_group(
      torch::optim::OptimizerParamGroup(gan.generator_f->parameters()));
  testing::TempDir dir;
  expect_invalid([&] { ckpt.write(dir.file("c.safetensors")); },
                 {"'generator_g_optimizer'", "not in its model 'generator_g'"});
  // Nothing of the failed adds was kept.
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"generator_g", "generator_g_optimizer"}));
}

torch::Tensor random_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

// Reads `path` into `gan`'s checkpoint as `configure` changes it, expecting a DataError that
// names the file and every one of `parts`; nothing of the gan may have changed.
void expect_refused(Gan& gan, const std::string& path,
                    const std::function<void(Checkpoint&)>& configure,
                    const std::vector<std::string>& parts) {
  const auto before = everything(gan);
  const auto random = random_state();
  Checkpoint ckpt;
  configure(ckpt);
  try {
    ckpt.read(path);
    ADD_FAILURE() << "expected a DataError";
  } catch (const DataError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
  }
  expect_identical(everything(gan), before);
  EXPECT_TRUE(torch::equal(random_state(), random));
  EXPECT_EQ(ckpt.state.step, 0);
}

TEST(NamedCheckpointTest, MismatchesAreNamedAndChangeNothing) {
  testing::TempDir dir;
  const std::string path = dir.file("gan.safetensors");
  Gan saved(1);
  saved.train(2);
  Checkpoint written = saved.checkpoint();
  written.state.step = 2;
  written.write(path);

  Gan gan(5);
  gan.train(1);  // with optimizer state, to see that it is left alone
  // An object added that the file lacks.
  auto extra = torch::ones({2});
  expect_refused(gan, path,
                 [&](Checkpoint& c) {
                   c = gan.checkpoint();
                   c.add("identity_weight", extra);
                 },
                 {"object 'identity_weight'", "not in the file"});
  // An object of the file not added.
  expect_refused(gan, path,
                 [&](Checkpoint& c) {
                   c.add("generator_g", gan.generator_g)
                       .add("generator_g_optimizer", gan.generator_g_optimizer.get())
                       .add("lambda", gan.lambda);
                 },
                 {"object 'discriminator_x'", "is in the file but was not added",
                  "skip(\"discriminator_x\")"});
  // A parameter of another shape, in the last model added: the ones before it pass.
  Gan wide(5);
  wide.generator_f = generator(6, 5);
  wide.generator_f_optimizer = std::make_unique<torch::optim::Adam>(wide.generator_f->parameters());
  expect_refused(wide, path, [&](Checkpoint& c) { c = wide.checkpoint(); },
                 {"object 'generator_f'", "tensor 'generator_f/0.weight'", "[5, 2, 3, 3]"});
  // A tensor of another dtype or shape.
  expect_refused(gan, path,
                 [&](Checkpoint& c) {
                   c = gan.checkpoint_except({"lambda"});
                   c.add("lambda", torch::tensor(1.0, torch::kDouble));
                 },
                 {"object 'lambda'", "tensor 'lambda'", "Double", "Float"});
  // An object of another kind, and an optimizer paired with another model.
  expect_refused(gan, path, [&](Checkpoint& c) { c.add("lambda", gan.generator_g); },
                 {"object 'lambda' is a tensor in the file but a model here"});
  expect_refused(gan, path,
                 [&](Checkpoint& c) {
                   c = gan.checkpoint_except({"generator_g_optimizer", "generator_f_optimizer"});
                   c.add("generator_g_optimizer", gan.generator_f_optimizer.get())  // swapped
                       .add("generator_f_optimizer", gan.generator_g_optimizer.get());
                 },
                 {"object 'generator_g_optimizer'", "model 'generator_g' in the file",
                  "model 'generator_f' here"});
  // Another optimizer class.
  torch::optim::SGD sgd(gan.discriminator_y->parameters(), torch::optim::SGDOptions(0.1));
  expect_refused(gan, path,
                 [&](Checkpoint& c) {
                   c = gan.checkpoint_except({"discriminator_y_optimizer"});
                   c.add("discriminator_y_optimizer", &sgd);
                 },
                 {"object 'discriminator_y_optimizer'", "Adam state but the optimizer is SGD"});

  // Skipped objects are left unread; the others are restored.
  Gan part(6);
  Checkpoint partial;
  partial.add("generator_g", part.generator_g).add("lambda", part.lambda);
  for (const char* name :
       {"generator_f", "discriminator_x", "discriminator_y", "generator_g_optimizer",
        "generator_f_optimizer", "discriminator_x_optimizer", "discriminator_y_optimizer"})
    partial.skip(name);
  const auto untouched = values_of(*part.generator_f);
  partial.read(path);
  expect_identical(values_of(*part.generator_g), values_of(*saved.generator_g));
  expect_identical(values_of(*part.generator_f), untouched);
  EXPECT_EQ(part.lambda.item<double>(), 11.0);
  EXPECT_EQ(partial.state.step, 2);
}

// ---- damage ------------------------------------------------------------------------------------

// The byte range of tensor `name`'s data in a safetensors file.
std::pair<size_t, size_t> data_of(const std::string& bytes, const std::string& name) {
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i)
    length |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  auto header = nlohmann::json::parse(bytes.substr(8, length));
  const auto offsets = header.at(name).at("data_offsets");
  return {8 + length + offsets[0].get<size_t>(), 8 + length + offsets[1].get<size_t>()};
}

TEST(NamedCheckpointTest, AFlippedByteInAnyObjectIsReportedByTensorBeforeAnythingChanges) {
  testing::TempDir dir;
  const std::string path = dir.file("gan.safetensors");
  Gan saved(1);
  saved.train(2);
  saved.checkpoint().write(path);
  const std::string clean = testing::read_file(path);
  for (const std::string tensor :
       {"generator_f/1.running_var", "discriminator_y_optimizer/3.weight/exp_avg_sq",
        "discriminator_x_optimizer/0.bias/step", "lambda"}) {
    SCOPED_TRACE(tensor);
    std::string bytes = clean;
    const auto [begin, end] = data_of(bytes, tensor);
    ASSERT_LT(begin, end);
    bytes[(begin + end) / 2] ^= 0x04;
    testing::write_file(path, bytes);
    Gan gan(5);
    expect_refused(gan, path, [&](Checkpoint& c) { c = gan.checkpoint(); },
                   {"tensor '" + tensor + "'", "does not match its checksum"});
  }
  // The list of objects is under the header checksum.
  testing::write_file(path, clean);
  SafetensorsFile file = load_safetensors(path);
  file.metadata["object/lambda"] = "model";
  save_safetensors(path, file.tensors, file.metadata);
  Gan gan(5);
  expect_refused(gan, path, [&](Checkpoint& c) { c = gan.checkpoint(); },
                 {"header checksum does not match"});
}

}  // namespace
}  // namespace dist
