// Issue 68, 1, 11 and 8: TorchScript files verified before they are used. Files written by
// Python (examples/python/make_torchscript_models.py --test-files, into
// DIST_TORCHSCRIPT_TEST_DIR) and damaged here as a bad copy or a hostile sender would: a tensor
// record cut short (LibTorch 1.13 trained on the heap's leftovers past it), a byte flipped, a
// zip bomb (a 3 MB file took 3.4 GB), an integer parameter (mirrored failed at its first step).
#include <gmock/gmock-matchers.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "dist/core/error.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/distribute/sharding.h"
#include "dist/models/torchscript_model.h"
#include "equivalence_data.h"
#include "models/torchscript_files.h"
#include "models/zip_files.h"
#include "test_util.h"

namespace dist::models {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::message_of;
using testing::TempDir;
using testing::ZipRecord;

using testing::model_file;

// The largest tensor record of `records` (cnn_scripted.pt's dense1.weight, 32 x 400 floats).
ZipRecord& largest_tensor_record(std::vector<ZipRecord>& records) {
  ZipRecord* largest = nullptr;
  for (ZipRecord& record : records) {
    const bool tensor = record.name.find("/data/") != std::string::npos;
    if (tensor && (largest == nullptr || record.data.size() > largest->data.size()))
      largest = &record;
  }
  EXPECT_NE(largest, nullptr);
  return *largest;
}

ZipRecord& record_named(std::vector<ZipRecord>& records, const std::string& suffix) {
  for (ZipRecord& record : records)
    if (record.name.size() >= suffix.size() &&
        record.name.compare(record.name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return record;
  ADD_FAILURE() << "no record ending in " << suffix;
  return records.front();
}

int64_t peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  return 0;
}

// Issue 68, 1: the record rewritten 100 bytes long, with a CRC-32 and sizes that agree (as
// Python's zipfile writes them): only the tensor's own size tells.
TEST(TorchScriptArchiveTest, ATensorRecordCutShortIsRefusedNamingItAndBothSizes) {
  TempDir dir;
  auto records = testing::read_zip(testing::read_file(model_file("cnn_scripted.pt")));
  ZipRecord& weight = largest_tensor_record(records);
  ASSERT_EQ(weight.data.size(), 51200u);
  weight.data.resize(100);
  const std::string record = weight.name.substr(weight.name.find('/') + 1);  // "data/4"
  const std::string path = dir.file("cut.pt");
  testing::write_file(path, testing::write_zip(records));
  const std::string message = message_of<DataError>([&] { load_torchscript(path); });
  std::printf("%s\n", message.c_str());
  EXPECT_THAT(message, AllOf(HasSubstr("'" + path + "'"), HasSubstr("'" + record + "'"),
                             HasSubstr("holds 100 bytes"), HasSubstr("Float tensor [32, 400]"),
                             HasSubstr("needs 51200"), HasSubstr("torch.jit.save")));
}

TEST(TorchScriptArchiveTest, AByteChangedInARecordIsRefusedByItsCrc) {
  TempDir dir;
  std::string bytes = testing::read_file(model_file("cnn_scripted.pt"));
  auto records = testing::read_zip(bytes);
  const ZipRecord& weight = largest_tensor_record(records);
  const size_t at = bytes.find(weight.data);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1000] = static_cast<char>(bytes[at + 1000] ^ 0x40);  // one float's exponent bit
  const std::string path = dir.file("flipped.pt");
  testing::write_file(path, bytes);
  const std::string message = message_of<DataError>([&] { load_torchscript(path); });
  std::printf("%s\n", message.c_str());
  EXPECT_THAT(message, AllOf(HasSubstr("'" + path + "' is damaged"),
                             HasSubstr("record '" + weight.name + "' (51200 bytes) has CRC-32"),
                             HasSubstr("copy the file again")));
}

// Issue 68, 11: data.pkl followed by 80 MiB of zeros, deflated to about 80 KB (the unpickler
// stops at its end: LibTorch loaded it, allocating and filling the 80 MiB first), and one whose
// zip64 field declares a terabyte.
TEST(TorchScriptArchiveTest, AZipBombIsRefusedByNameBeforeAnythingIsAllocated) {
  TempDir dir;
  const auto good = testing::read_zip(testing::read_file(model_file("cnn_scripted.pt")));
  auto bomb = good;
  ZipRecord& pickle = record_named(bomb, "/data.pkl");
  const std::string pickled = pickle.data;
  pickle = testing::deflated_zeros(pickle.name, pickled, uint64_t{80} << 20);
  const std::string path = dir.file("bomb.pt");
  testing::write_file(path, testing::write_zip(bomb));
  const int64_t file_size = static_cast<int64_t>(testing::read_file(path).size());
  const int64_t peak_before = peak_resident_bytes();
  const auto start = std::chrono::steady_clock::now();
  const std::string message = message_of<DataError>([&] { load_torchscript(path); });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t growth = peak_resident_bytes() - peak_before;
  std::printf("%s\nfile %lld bytes; refused in %.3f s; peak resident memory grew %lld bytes\n",
              message.c_str(), static_cast<long long>(file_size), seconds,
              static_cast<long long>(growth));
  EXPECT_THAT(message,
              AllOf(HasSubstr("'" + path + "'"), HasSubstr("zip bomb"),
                    HasSubstr("data.pkl' alone " + std::to_string((80 << 20) + pickled.size()))));
  EXPECT_LT(file_size, 1 << 20);
  EXPECT_LT(growth, 32 << 20);

  auto terabyte = good;
  record_named(terabyte, "/data.pkl").deflate = true;
  record_named(terabyte, "/data.pkl").declared_size = int64_t{1} << 40;
  testing::write_file(path, testing::write_zip(terabyte, /*zip64=*/true));
  EXPECT_THAT(message_of<DataError>([&] { load_torchscript(path); }),
              AllOf(HasSubstr("data.pkl' alone 1099511627776"), HasSubstr("zip bomb")));
}

TEST(TorchScriptArchiveTest, RecordsWhoseSizesDisagreeAreRefusedByName) {
  TempDir dir;
  const auto good = testing::read_zip(testing::read_file(model_file("cnn_scripted.pt")));
  const std::string path = dir.file("sizes.pt");
  auto stored = good;
  ZipRecord& pickle = record_named(stored, "/data.pkl");
  pickle.declared_size = static_cast<int64_t>(pickle.data.size()) + 1;
  testing::write_file(path, testing::write_zip(stored));
  EXPECT_THAT(message_of<DataError>([&] { load_torchscript(path); }),
              HasSubstr("data.pkl' is stored (not compressed) in "));
  auto deflated = good;
  record_named(deflated, "/data.pkl").deflate = true;
  record_named(deflated, "/data.pkl").declared_size = 100000;
  testing::write_file(path, testing::write_zip(deflated));
  EXPECT_THAT(message_of<DataError>([&] { load_torchscript(path); }),
              AllOf(HasSubstr("data.pkl' declares 100000 bytes but inflates to "),
                    HasSubstr("'" + path + "' is damaged")));
}

// What a verified archive may be: zip64 (as a writer makes it past 4 GiB), deflated records.
TEST(TorchScriptArchiveTest, Zip64AndDeflatedRecordsLoadAsTheOriginal) {
  TempDir dir;
  auto records = testing::read_zip(testing::read_file(model_file("cnn_scripted.pt")));
  for (ZipRecord& record : records) record.deflate = true;
  const std::string path = dir.file("zip64.pt");
  testing::write_file(path, testing::write_zip(records, /*zip64=*/true));
  auto original = load_torchscript(model_file("cnn_scripted.pt"));
  auto rewritten = load_torchscript(path);
  const auto expected = original->named_parameters();
  for (const auto& item : rewritten->named_parameters())
    EXPECT_TRUE(torch::equal(item.value(), expected[item.key()])) << item.key();
}

// Every module the other tests load passes, and the check costs little beside the load.
TEST(TorchScriptArchiveTest, TheVerificationCostsLittleBesideTheLoad) {
  const std::string path = model_file("resnet18.pt");
  const auto start = std::chrono::steady_clock::now();
  auto model = load_torchscript(path);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("resnet18.pt (%zu bytes) loaded and verified in %.3f s\n",
              testing::read_file(path).size(), seconds);
  EXPECT_EQ(model->named_parameters().size(), 62u);
}

// Issue 68, 8: an int64 parameter passed the start-up check; Adam under mirrored then failed at
// the first step with LibTorch's backtrace. Integer buffers (BatchNorm's) stay as they are.
TEST(TorchScriptArchiveTest, AnIntegerParameterIsRefusedByNameAndIntegerBuffersLoad) {
  const std::string path = model_file("int_parameter.pt");
  const std::string message = message_of<InvalidArgument>([&] { load_torchscript(path); });
  std::printf("%s\n", message.c_str());
  EXPECT_THAT(message, AllOf(HasSubstr("'" + path + "'"), HasSubstr("Long parameter 'steps'"),
                             HasSubstr("self.register_buffer('steps', tensor)")));
  auto resnet = load_torchscript(model_file("resnet18.pt"));
  EXPECT_EQ(resnet->named_buffers()["bn1.num_batches_tracked"].scalar_type(), torch::kLong);
}

// Floating parameters with requires_grad off, which no optimizer steps either, are left as they
// are: they get no gradient, so the optimizers skip them under every strategy; they stay
// unchanged and the rest trains to one device's weights.
std::vector<at::Tensor> train_partly_frozen(const Strategy& strategy) {
  torch::nn::Sequential net;
  net->push_back("cnn", load_torchscript(model_file("partly_frozen.pt")));
  auto model = strategy.mirror(net);
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-2));
  std::vector<at::Tensor> weights;
  for (const auto& [name, value] : testing::train_one_pass(strategy, model, *optimizer))
    weights.push_back(value);
  return weights;
}

TEST(TorchScriptArchiveTest, FrozenFloatParametersStayAndTheRestTrainsAsOnOneDevice) {
  const std::vector<at::Tensor> initial =
      load_torchscript(model_file("partly_frozen.pt"))->parameters();
  const auto one = train_partly_frozen(OneDeviceStrategy());
  MirroredOptions two;
  two.devices = {"cpu:0", "cpu:1"};
  two.threads_per_replica = 1;
  MirroredOptions sharded = two;
  sharded.sharding = Sharding::kOptimizer;
  for (const auto& options : {two, sharded}) {
    const auto mirrored = train_partly_frozen(MirroredStrategy(options));
    EXPECT_LT(testing::max_relative_difference(mirrored, one), 1e-5);
    for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(torch::equal(mirrored[i], initial[i])) << i;
  }
  EXPECT_GT(testing::max_relative_difference(one, initial), 1e-3) << "nothing trained";
}

}  // namespace
}  // namespace dist::models
