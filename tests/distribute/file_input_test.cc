// Input from files as the strategies consume it (issue 56): one device trained from PNG
// TFRecord shards equals one device trained from the IDX files bit for bit (FileInputTest, in
// one process), and sharding by file hands every record to exactly one worker once per epoch
// (FileShardCountTest: real worker processes on 127.0.0.1, bounded in time). The workers are
// this binary itself, started with DIST_FILE_SHARD_WORKER set to run FileShardWorker's case.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "dist/data/example.h"
#include "dist/data/files.h"
#include "dist/data/image_codec.h"
#include "dist/data/mnist.h"
#include "dist/data/tfrecord.h"
#include "dist/data/tfrecord_dataset.h"
#include "dist/distribute/local_cluster.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/train/image_export.h"
#include "multi_worker/process_group.h"
#include "test_util.h"

namespace dist {
namespace {

using data::Dataset;
using data::Element;
using namespace std::chrono_literals;

// The first 640 training examples: 10 batches of 64.
constexpr int64_t kExamples = 640;

Dataset idx_bytes() {
  return data::fashion_mnist_bytes(data::kFashionMnistDefaultDir, data::Split::kTrain)
      .take(kExamples);
}

// The PNG TFRecord shards' examples in file order: {uint8 [1, 28, 28], int64 label}.
Dataset decoded_from(const std::vector<std::string>& files) {
  const data::FeatureSpec spec(
      {data::FixedLenFeature("image/encoded", data::FeatureType::kBytes, {}),
       data::FixedLenFeature("image/class/label", data::FeatureType::kInt64, {})});
  return data::tfrecord_dataset(files).map([spec](Element record) {
    Element parsed = data::parse_example(data::string_of(record[0]), spec);
    return Element{data::decode_image(parsed[0], {1, 0, 0}), parsed[1]};
  });
}

// Plain LibTorch SGD steps of the tutorial CNN over `batches` (images scaled, labels), from
// the same initial weights every time.
std::vector<torch::Tensor> trained_on(const Dataset& batches) {
  torch::manual_seed(11);
  auto model = models::make_tutorial_cnn();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  int steps = 0;
  for (const Element& batch : batches.iterator(0)) {
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(batch[0]), batch[1]).backward();
    sgd.step();
    ++steps;
  }
  EXPECT_EQ(steps, kExamples / 64);
  std::vector<torch::Tensor> weights;
  for (const auto& p : model->parameters()) weights.push_back(p.detach().clone());
  return weights;
}

TEST(FileInputTest, PngShardsDecodeToTheIdxPixelsExactly) {
  testing::TempDir dir;
  const auto files = write_image_tfrecords(idx_bytes(), dir.file("train"), 8);
  ASSERT_EQ(files.size(), 8u);
  auto from_files = decoded_from(files).iterator(0);
  int64_t n = 0;
  for (const Element& expected : idx_bytes().iterator(0)) {
    auto got = from_files.next();
    ASSERT_TRUE(got.has_value()) << "the files end after " << n << " examples";
    ASSERT_EQ((*got)[0].sizes(), expected[0].sizes()) << "example " << n;
    EXPECT_TRUE(torch::equal((*got)[0], expected[0])) << "example " << n;
    EXPECT_EQ((*got)[1].item<int64_t>(), expected[1].item<int64_t>()) << "example " << n;
    ++n;
  }
  EXPECT_FALSE(from_files.next().has_value());
  EXPECT_EQ(n, kExamples);
}

TEST(FileInputTest, OneDeviceFromPngShardsEqualsOneDeviceFromIdxBitForBit) {
  testing::TempDir dir;
  const auto files = write_image_tfrecords(idx_bytes(), dir.file("train"), 8);
  const auto from_files = trained_on(decoded_from(files)
                                         .map([](Element e) {
                                           return Element{data::scale_images(e[0]), e[1]};
                                         })
                                         .batch(64));
  const auto from_idx =
      trained_on(data::fashion_mnist(data::kFashionMnistDefaultDir, data::Split::kTrain)
                     .take(kExamples)
                     .batch(64));
  ASSERT_EQ(from_files.size(), from_idx.size());
  for (size_t i = 0; i < from_idx.size(); ++i)
    EXPECT_TRUE(torch::equal(from_files[i], from_idx[i]))
        << "parameter " << i << " differs by "
        << (from_files[i] - from_idx[i]).abs().max().item<double>();
  // The steps moved the weights (the comparison is not of two untouched models).
  torch::manual_seed(11);
  auto initial = models::make_tutorial_cnn();
  EXPECT_FALSE(torch::equal(initial->parameters()[0], from_idx[0]));
}

// --- sharding by file, counted ------------------------------------------------------------

// Files of records {"id": int64}, file f holding 3 + 2f consecutive ids: uneven, so that the
// workers' inputs end at different steps.
constexpr int kIdFiles = 7;
constexpr int64_t kGlobalBatch = 12;  // divides among 2 and 3 workers

std::map<int64_t, int> write_id_files(const std::string& dir) {
  std::map<int64_t, int> file_of;
  int64_t id = 0;
  for (int f = 0; f < kIdFiles; ++f) {
    data::TFRecordWriter out(dir + "/ids-" + std::to_string(f) + ".tfrecord");
    for (int r = 0; r < 3 + 2 * f; ++r, ++id) {
      out.write(data::ExampleBuilder().add_int64("id", id).serialize());
      file_of[id] = f;
    }
    out.close();
  }
  return file_of;
}

constexpr const char* kNotAWorker =
    "runs only as a worker process of FileShardCountTest (DIST_FILE_SHARD_WORKER set)";

// A worker: DIST_FILE_SHARD_WORKER="DIR,POLICY" (POLICY "file" or "auto"), TF_CONFIG from the
// test. Iterates two epochs of the id files (files shuffled per epoch) distributed by POLICY and
// writes the ids its replica got, "epoch id" per line, to DIR/seen-<worker index>.
TEST(FileShardWorker, ReadsTwoEpochsOfItsShare) {
  const char* spec = std::getenv("DIST_FILE_SHARD_WORKER");
  if (spec == nullptr) GTEST_SKIP() << kNotAWorker;
  const std::string text = spec;
  const std::string dir = text.substr(0, text.find(','));
  const std::string policy = text.substr(text.find(',') + 1);
  MultiWorkerOptions options;
  options.threads_per_replica = 1;
  options.communication.timeout = 20s;
  options.communication.rendezvous_timeout = 20s;
  MultiWorkerMirroredStrategy strategy(options);
  data::TFRecordOptions read;
  read.shuffle_files = true;
  read.seed = 3;
  const data::FeatureSpec features({data::FixedLenFeature("id", data::FeatureType::kInt64, {})});
  Dataset ids = data::tfrecord_dataset(data::match_files(dir + "/ids-*.tfrecord"), read)
                    .map([features](Element r) {
                      return data::parse_example(data::string_of(r[0]), features);
                    })
                    .batch(kGlobalBatch);
  DistributeOptions distribute;
  distribute.auto_shard_policy = policy == "file" ? AutoShardPolicy::kFile : AutoShardPolicy::kAuto;
  auto distributed = strategy.experimental_distribute_dataset(ids, distribute);
  std::ofstream out(dir + "/seen-" + std::to_string(strategy.worker_index()));
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (const auto& step : distributed.iterator(epoch)) {
      ASSERT_EQ(step.size(), 1);
      const at::Tensor batch = step[0][0];
      for (int64_t i = 0; i < batch.size(0); ++i)
        out << epoch << ' ' << batch[i].item<int64_t>() << '\n';
    }
  }
  out.close();
  ASSERT_TRUE(out.good());
}

struct ShardCase {
  int workers;
  std::string policy;
};

void PrintTo(const ShardCase& c, std::ostream* out) {
  *out << c.workers << " workers, policy " << c.policy;
}

class FileShardCountTest : public ::testing::TestWithParam<ShardCase> {};

// Every id is read exactly once per epoch, by the worker whose files hold it: worker i reads
// files i, i + N, ... (in the sorted order of the names) and no other.
TEST_P(FileShardCountTest, EveryRecordIsReadOnceAnEpochByTheWorkerOwningItsFile) {
  const auto [workers, policy] = GetParam();
  testing::TempDir dir;
  const auto file_of = write_id_files(dir.path());
  const auto ports = free_loopback_ports(workers);
  testing::WorkerProcesses processes;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (int w = 0; w < workers; ++w)
    processes.start(self, {"--gtest_color=no", "--gtest_filter=FileShardWorker.*"},
                    {"TF_CONFIG=" + local_tf_config(ports, w),
                     "DIST_FILE_SHARD_WORKER=" + dir.path() + "," + policy});
  const auto results = processes.wait_all(30s);
  for (int w = 0; w < workers; ++w) {
    const auto& r = results[static_cast<size_t>(w)];
    ASSERT_EQ(r.exit_code, 0) << "worker " << w << ":\n" << r.output;
    ASSERT_TRUE(testing::contains(r.output, "[       OK ] FileShardWorker.")) << r.output;
  }
  std::map<int64_t, std::map<int64_t, int>> reads;  // epoch -> id -> times read
  for (int w = 0; w < workers; ++w) {
    std::istringstream lines(testing::read_file(dir.file("seen-" + std::to_string(w))));
    int64_t epoch = 0, id = 0;
    while (lines >> epoch >> id) {
      ++reads[epoch][id];
      ASSERT_TRUE(file_of.count(id)) << "unknown id " << id;
      EXPECT_EQ(file_of.at(id) % workers, w)
          << "worker " << w << " read id " << id << " of file " << file_of.at(id);
    }
  }
  ASSERT_EQ(reads.size(), 2u);
  for (const auto& [epoch, counts] : reads) {
    EXPECT_EQ(counts.size(), file_of.size()) << "epoch " << epoch << " missed ids";
    for (const auto& [id, times] : counts)
      EXPECT_EQ(times, 1) << "epoch " << epoch << ": id " << id << " read " << times << " times";
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, FileShardCountTest,
                         ::testing::Values(ShardCase{2, "file"}, ShardCase{3, "file"},
                                           ShardCase{3, "auto"}),
                         [](const auto& info) {
                           return std::to_string(info.param.workers) + "Workers" +
                                  (info.param.policy == "file" ? "File" : "Auto");
                         });

}  // namespace
}  // namespace dist
