// Checkpoint and CheckpointManager: exact round trips, retention, portability across replica
// counts, and every kind of damaged file giving a named error.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/crc32c.h"
#include "cpu_replicas.h"
#include "dist/core/error.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/train/checkpoint.h"
#include "dist/train/loss.h"
#include "dist/train/safetensors.h"
#include "equivalence_data.h"
#include "test_util.h"

namespace dist {
namespace {

TEST(Crc32cTest, KnownVectorsOnBothImplementations) {
  // RFC 3720 (iSCSI) appendix B.4 and the common "123456789" check value.
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF), ascending(32);
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<unsigned char>(i);
  const std::string check = "123456789";
  for (auto fn : {+[](const void*d, size_t n) { return crc32c(d, n); },
                  +[](const void*d, size_t n) { return detail::crc32c_portable(d, n); }}) {
    EXPECT_EQ(fn(check.data(), check.size()), 0xE3069283u);
    EXPECT_EQ(fn(zeros.data(), 32), 0x8A9136AAu);
    EXPECT_EQ(fn(ones.data(), 32), 0x62A8AB43u);
    EXPECT_EQ(fn(ascending.data(), 32), 0x46DD794Eu);
  }
  // Continuing a checksum equals checksumming the concatenation, at every split.
  for (size_t split = 0; split <= check.size(); ++split)
    EXPECT_EQ(crc32c(check.data() + split, check.size() - split, crc32c(check.data(), split)),
              0xE3069283u);
}

std::shared_ptr<torch::nn::SequentialImpl> small_model(int seed) {
  torch::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8),
                               torch::nn::Functional(torch::relu), torch::nn::Linear(8, 3))
      .ptr();
}

void train_steps(torch::nn::SequentialImpl& net, torch::optim::Optimizer& optimizer, int steps) {
  for (int i = 0; i < steps; ++i) {
    optimizer.zero_grad();
    auto x = torch::randn({6, 4});  // from the generator the checkpoint restores
    torch::nn::functional::cross_entropy(net.forward(x), torch::arange(6) % 3).backward();
    optimizer.step();
  }
}

std::vector<torch::Tensor> state_of(const torch::nn::Module& model) {
  std::vector<torch::Tensor> all;
  for (const auto& p : model.parameters()) all.push_back(p.detach().clone());
  for (const auto& b : model.buffers()) all.push_back(b.clone());
  return all;
}

TEST(CheckpointTest, RestoringContinuesTrainingBitForBit) {
  testing::TempDir dir;
  auto model = small_model(1);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  train_steps(*model, adam, 3);
  Checkpoint saved(model, &adam);
  saved.state.step = 3;
  saved.state.epoch = 1;
  saved.state.position = {1, 7};
  saved.state.values["note"] = "hello";
  saved.write(dir.file("c.safetensors"));
  train_steps(*model, adam, 4);
  const auto expected = state_of(*model);

  auto other = small_model(2);  // different initial values and no optimizer state yet
  torch::optim::Adam other_adam(other->parameters(), torch::optim::AdamOptions(0.5));
  torch::manual_seed(99);  // a different generator state, to be restored
  Checkpoint restored(other, &other_adam);
  restored.read(dir.file("c.safetensors"));
  EXPECT_EQ(restored.state.step, 3);
  EXPECT_EQ(restored.state.epoch, 1);
  EXPECT_EQ(restored.state.position, (data::IteratorPosition{1, 7}));
  EXPECT_EQ(restored.state.values.at("note"), "hello");
  EXPECT_DOUBLE_EQ(other_adam.param_groups()[0].options().get_lr(), 0.01);
  train_steps(*other, other_adam, 4);
  const auto actual = state_of(*other);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_TRUE(torch::equal(actual[i], expected[i])) << i;

  // The weights are plain safetensors: "model/<name>" for other tools.
  auto file = load_safetensors(dir.file("c.safetensors"));
  EXPECT_EQ(file.tensors.front().first, "model/0.weight");
  EXPECT_EQ(file.metadata.at("format"), "dist.checkpoint/1");
}

TEST(CheckpointTest, AModelThatDoesNotMatchIsRefusedBeforeAnythingChanges) {
  testing::TempDir dir;
  auto model = small_model(1);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  train_steps(*model, sgd, 2);
  Checkpoint(model, &sgd).write(dir.file("c.safetensors"));

  torch::manual_seed(5);
  auto wider = torch::nn::Sequential(torch::nn::Linear(4, 9), torch::nn::BatchNorm1d(9),
                                     torch::nn::Functional(torch::relu), torch::nn::Linear(9, 3))
                   .ptr();
  torch::optim::SGD wider_sgd(wider->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const auto before = state_of(*wider);
  Checkpoint into_wider(wider, &wider_sgd);
  try {
    into_wider.read(dir.file("c.safetensors"));
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("model/0.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("c.safetensors"), std::string::npos) << e.what();
  }
  const auto after = state_of(*wider);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::equal(before[i], after[i]));

  auto same = small_model(3);
  torch::optim::Adam adam(same->parameters(), torch::optim::AdamOptions(0.1));
  Checkpoint with_adam(same, &adam);
  EXPECT_THROW(with_adam.read(dir.file("c.safetensors")), DataError);  // SGD state, not Adam
}

TEST(CheckpointManagerTest, KeepsExactlyTheNewestAndPointsAtTheLatest) {
  testing::TempDir dir;
  auto model = small_model(1);
  CheckpointManager manager(dir.path(), 3);
  EXPECT_FALSE(manager.latest().has_value());
  Checkpoint checkpoint(model, nullptr);
  for (int step = 1; step <= 10; ++step) {
    checkpoint.state.step = step * 10;
    manager.save(checkpoint);
  }
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"checkpoint", "ckpt-100.safetensors",
                                             "ckpt-80.safetensors", "ckpt-90.safetensors"}));
  EXPECT_EQ(manager.latest(), dir.file("ckpt-100.safetensors"));
  EXPECT_EQ(manager.checkpoints(), (std::vector<std::string>{dir.file("ckpt-80.safetensors"),
                                                             dir.file("ckpt-90.safetensors"),
                                                             dir.file("ckpt-100.safetensors")}));
  // Leftovers of an interrupted save are removed by the next save.
  testing::write_file(dir.file("ckpt-110.safetensors.tmp.12345"), "partial");
  checkpoint.state.step = 110;
  manager.save(checkpoint);
  EXPECT_FALSE(std::filesystem::exists(dir.file("ckpt-110.safetensors.tmp.12345")));
}

// ---- damaged files --------------------------------------------------------------------------

// Rewrites a safetensors file's header (keeping its data) through `edit`.
void rewrite_header(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  std::string bytes = testing::read_file(path);
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i)
    length |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  auto header = nlohmann::json::parse(bytes.substr(8, length));
  edit(header);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
  testing::write_file(path, out + text + bytes.substr(8 + length));
}

struct Damage {
  const char* name;
  std::function<void(const std::string& path)> apply;
  const char* expected;  // in the error message
};

class CheckpointDamageTest : public ::testing::TestWithParam<Damage> {};

TEST_P(CheckpointDamageTest, GivesANamedErrorAndThePreviousCheckpointStillLoads) {
  testing::TempDir dir;
  auto model = small_model(1);
  torch::optim::Adam adam(model->parameters());
  train_steps(*model, adam, 1);
  CheckpointManager manager(dir.path(), 3);
  Checkpoint checkpoint(model, &adam);
  checkpoint.state.step = 1;
  const std::string previous = manager.save(checkpoint);
  checkpoint.state.step = 2;
  const std::string latest = manager.save(checkpoint);

  GetParam().apply(latest);
  Checkpoint reader(small_model(2), nullptr);
  try {
    reader.read(latest);
    FAIL() << "expected a DataError for " << GetParam().name;
  } catch (const DataError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(latest), std::string::npos) << message;
    EXPECT_NE(message.find(GetParam().expected), std::string::npos) << message;
  }
  reader.read(previous);
  EXPECT_EQ(reader.state.step, 1);
}

const std::string kTensor = "model/0.weight";

// `path`'s bytes changed by `edit`.
void edit_file(const std::string& path, const std::function<void(std::string&)>& edit) {
  std::string bytes = testing::read_file(path);
  edit(bytes);
  testing::write_file(path, bytes);
}

// Damages to a checkpoint's bytes: cut short, emptied, a byte flipped, its header's length.
std::vector<Damage> byte_damages() {
  auto bytes = [](std::function<void(std::string&)> edit) {
    return [edit](const std::string& p) { edit_file(p, edit); };
  };
  return {
      Damage{"Truncated",
             [](const std::string& p) {
               std::filesystem::resize_file(p, std::filesystem::file_size(p) - 5);
             },
             "truncated"},
      Damage{"Empty", [](const std::string& p) { testing::write_file(p, ""); }, "0 bytes long"},
      // In the last tensor: the random state.
      Damage{"FlippedDataByte", bytes([](std::string& b) { b[b.size() - 3] ^= 0x10; }),
             "does not match its checksum"},
      Damage{"FlippedFirstTensorByte", bytes([](std::string& b) {
               uint64_t n = 0;
               for (int i = 0; i < 8; ++i)
                 n |= static_cast<uint64_t>(static_cast<unsigned char>(b[i])) << (8 * i);
               b[8 + n + 1] ^= 0x01;  // model/0.weight comes first
             }),
             "tensor 'model/0.weight'"},
      // The header's opening '{'.
      Damage{"FlippedHeaderByteBreakingJson", bytes([](std::string& b) { b[8] ^= 0x40; }),
             "not valid JSON"},
      Damage{"WrongHeaderLength", bytes([](std::string& b) {
               b[0] = static_cast<char>(static_cast<unsigned char>(b[0]) + 8);
             }),
             "header"},
      Damage{"HugeHeaderLength", bytes([](std::string& b) { b[7] = 0x40; }), "exceeds the limit"}};
}

// Damages to a checkpoint's header, rewritten as valid JSON of the right length.
std::vector<Damage> header_damages() {
  auto header = [](std::function<void(nlohmann::json&)> edit) {
    return [edit](const std::string& p) { rewrite_header(p, edit); };
  };
  return {Damage{"FlippedHeaderValue",
                 header([](nlohmann::json& h) { h["__metadata__"]["step"] = "7"; }),
                 "header checksum does not match"},
          Damage{"AbsurdShape",
                 header([](nlohmann::json& h) { h[kTensor]["shape"] = {uint64_t{1} << 62}; }),
                 "tensor 'model/0.weight'"},
          Damage{"NegativeDimension", header([](nlohmann::json& h) {
                   h[kTensor]["shape"] = {-8, 4};
                 }),
                 "negative dimension"},
          Damage{"OffsetsPastTheEnd", header([](nlohmann::json& h) {
                   h[kTensor]["data_offsets"] = {0, uint64_t{1} << 40};
                 }),
                 "past the end"},
          Damage{"BytesDoNotMatchShape", header([](nlohmann::json& h) {
                   h[kTensor]["shape"] = {8, 3};
                 }),
                 "needs"}};
}

std::vector<Damage> damages() {
  std::vector<Damage> all = byte_damages();
  for (Damage& d : header_damages()) all.push_back(std::move(d));
  return all;
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, CheckpointDamageTest, ::testing::ValuesIn(damages()),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- portability across replica counts --------------------------------------------------------

// Trains steps [from, to) of the equivalence batches under `strategy`, after restoring
// `restore_from` if given; saves a checkpoint after the last step to `save_to` if given.
std::vector<torch::Tensor> train_range(const Strategy& strategy, int from, int to,
                                       const std::string& restore_from,
                                       const std::string& save_to) {
  torch::manual_seed(11);
  auto model = strategy.mirror(models::make_tutorial_cnn());
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3));
  Checkpoint checkpoint(model, optimizer.get());
  auto data = strategy.experimental_distribute_dataset(testing::equivalence_data());
  data::IteratorPosition position{0, from};
  if (!restore_from.empty()) {
    checkpoint.read(restore_from);
    position = checkpoint.state.position;
  }
  SparseCategoricalCrossentropy loss_fn(true, Reduction::kNone);
  auto batches = data.iterator_at(position);
  int step = from;
  for (const auto& batch : batches) {
    if (step++ == to) break;
    strategy.run(
        [&](const data::Element& b) {
          compute_average_loss(loss_fn(b[1], model->forward(b[0]))).backward();
          optimizer->apply_gradients();
        },
        batch);
  }
  if (!save_to.empty()) {
    checkpoint.state.step = to;
    checkpoint.state.position = {0, to};
    checkpoint.write(save_to);
  }
  std::vector<torch::Tensor> weights;
  for (const auto& p : model.primary()->parameters()) weights.push_back(p.detach().clone());
  return weights;
}

TEST(CheckpointPortabilityTest, SavedWithTwoReplicasContinuesWithOneThreeOrNoStrategy) {
  testing::TempDir dir;
  const std::string saved = dir.file("two.safetensors");
  train_range(testing::cpu_replicas(2), 0, 8, "", saved);
  const auto expected = train_range(testing::cpu_replicas(2), 8, 16, saved, "");
  for (int n : {1, 3}) {
    const auto actual = train_range(testing::cpu_replicas(n), 8, 16, saved, "");
    const double diff = testing::max_relative_difference(actual, expected);
    std::printf("restored with %d replicas: max relative difference %.3g\n", n, diff);
    EXPECT_LT(diff, 1e-5) << n << " replicas";
  }
  const auto one_device = train_range(OneDeviceStrategy("cpu:0"), 8, 16, saved, "");
  EXPECT_LT(testing::max_relative_difference(one_device, expected), 1e-5);
}

}  // namespace
}  // namespace dist
