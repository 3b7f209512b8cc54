// The pieces of pipelines over files: list_files, interleave, parallel map, shard,
// from_generator, ignore_errors, tfrecord_dataset, image_folder and sharding by file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "data/dataset_testing.h"
#include "data/sharding/file_shard.h"
#include "data/sharding/row_share.h"
#include "dist/core/error.h"
#include "dist/data/dataset.h"
#include "dist/data/files.h"
#include "dist/data/ignored_errors.h"
#include "dist/data/image_folder.h"
#include "dist/data/tfrecord.h"
#include "dist/data/tfrecord_dataset.h"
#include "dist/train/image_io.h"
#include "test_util.h"

namespace dist::data {
namespace {

using testing::message_of;
using testing::TempDir;

using testing::range;
using testing::values_of;

std::vector<std::string> strings_of(Iterator it) {
  std::vector<std::string> out;
  while (auto e = it.next()) out.push_back(string_of((*e)[0]));
  return out;
}

using testing::contains;

// `files` TFRecord files of `per_file` records each; record r of file f is "f:r".
std::vector<std::string> write_shards(const TempDir& dir, int files, int per_file) {
  std::vector<std::string> paths;
  for (int f = 0; f < files; ++f) {
    paths.push_back(dir.file("shard-" + std::to_string(f) + ".tfrecord"));
    TFRecordWriter out(paths.back());
    for (int r = 0; r < per_file; ++r) out.write(std::to_string(f) + ":" + std::to_string(r));
    out.close();
  }
  return paths;
}

TEST(FilePipelineTest, ListFilesIsSortedAndShufflesPerEpochBySeed) {
  TempDir dir;
  for (const char* name : {"b.rec", "a.rec", "c.rec", "notes.txt"})
    testing::write_file(dir.file(name), "x");
  auto sorted = strings_of(list_files(dir.file("*.rec"), /*shuffle=*/false).iterator());
  EXPECT_EQ(sorted,
            (std::vector<std::string>{dir.file("a.rec"), dir.file("b.rec"), dir.file("c.rec")}));
  auto shuffled = list_files(dir.file("*.rec"), true, 5);
  EXPECT_EQ(strings_of(shuffled.iterator(3)), strings_of(shuffled.iterator(3)));
  std::set<std::vector<std::string>> orders;
  for (int epoch = 0; epoch < 8; ++epoch) {
    auto order = strings_of(shuffled.iterator(epoch));
    auto same = order;
    std::sort(same.begin(), same.end());
    EXPECT_EQ(same, sorted);
    orders.insert(order);
  }
  EXPECT_GT(orders.size(), 1u) << "8 epochs, one order: the seed and epoch are not used";
  EXPECT_EQ(list_files(dir.file("*.rec")).cardinality(), 3);
}

TEST(FilePipelineTest, ListFilesNamesWhatItCannotUse) {
  TempDir dir;
  const std::string nothing = message_of<DataError>([&] { list_files(dir.file("*.tfrecord")); });
  EXPECT_TRUE(contains(nothing, "no file matches")) << nothing;
  EXPECT_TRUE(contains(nothing, dir.file("*.tfrecord"))) << nothing;
  std::filesystem::create_directory(dir.file("d.rec"));
  testing::write_file(dir.file("a.rec"), "x");
  const std::string directory = message_of<DataError>([&] { list_files(dir.file("*.rec")); });
  EXPECT_TRUE(contains(directory, "d.rec' (matched by")) << directory;
  EXPECT_TRUE(contains(directory, "a directory")) << directory;
  std::filesystem::remove(dir.file("d.rec"));
  ASSERT_EQ(::mkfifo(dir.file("f.rec").c_str(), 0600), 0);
  const std::string fifo = message_of<DataError>([&] { list_files(dir.file("*.rec")); });
  EXPECT_TRUE(contains(fifo, "FIFO")) << fifo;
}

TEST(FilePipelineTest, ParallelMapKeepsTheSequentialOrderAndContexts) {
  auto fn = [](Element e, const ElementContext& c) {
    // Uneven work, so that threads finish out of order.
    if (c.index % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    return Element{e[0] * 10 + c.index, torch::tensor(c.epoch)};
  };
  auto sequential = range(50).shuffle(50, 1).map_with_context(fn);
  auto parallel = range(50).shuffle(50, 1).map_with_context(fn, MapOptions{4});
  EXPECT_EQ(values_of(parallel.iterator(2)), values_of(sequential.iterator(2)));
  EXPECT_EQ(parallel.cardinality(), 50);
  // Restoring a position skips without calling fn and gives the rest with the same contexts.
  auto it = parallel.iterator(2);
  for (int i = 0; i < 7; ++i) it.next();
  EXPECT_EQ(it.skip(5), 5);
  auto rest = values_of(std::move(it));
  auto all = values_of(sequential.iterator(2));
  EXPECT_EQ(rest, std::vector<int64_t>(all.begin() + 12, all.end()));
  EXPECT_EQ(values_of(parallel.iterator_at({2, 20})),
            std::vector<int64_t>(all.begin() + 20, all.end()));
}

TEST(FilePipelineTest, ParallelMapHandsOutAnErrorAtItsPlaceAndAnyOrderWhenAsked) {
  auto failing = range(10).map(
      [](Element e) {
        if (e[0].item<int64_t>() == 6) throw DataError("element 6 is bad");
        return e;
      },
      MapOptions{3});
  auto it = failing.iterator();
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ((*it.next())[0].item<int64_t>(), i);
  EXPECT_THROW(it.next(), DataError);
  auto unordered =
      values_of(range(40).map([](Element e) { return e; }, MapOptions{4, false}).iterator());
  std::sort(unordered.begin(), unordered.end());
  std::vector<int64_t> expected(40);
  for (int64_t i = 0; i < 40; ++i) expected[static_cast<size_t>(i)] = i;
  EXPECT_EQ(unordered, expected);
  EXPECT_THROW(range(3).map([](Element e) { return e; }, MapOptions{0}), InvalidArgument);
}

TEST(FilePipelineTest, InterleaveTakesBlocksInTurnAndRefillsFinishedPlaces) {
  // Element k opens a dataset of k * 100 + (0 .. k): sizes 1, 2, 3, 4.
  auto make = [](const Element& e) {
    const int64_t k = e[0].item<int64_t>();
    return Dataset::from_tensor_slices({torch::arange(k + 1) + k * 100});
  };
  auto order = values_of(range(4).interleave(make, {2, 2}).iterator());
  // tf.data's order, places filled at their turn, blocks of 2: place 0 opens 0: 0 (ends) |
  // place 1 opens 1: 100 101 | place 0 opens 2: 200 201 | place 1's ends | place 0: 202 (ends)
  // | place 1 opens 3: 300 301 | place 0 empty | place 1: 302 303.
  EXPECT_EQ(order, (std::vector<int64_t>{0, 100, 101, 200, 201, 202, 300, 301, 302, 303}));
  auto threaded = values_of(range(4).interleave(make, {2, 2, 2}).iterator());
  EXPECT_EQ(threaded, order);
  EXPECT_EQ(range(4).interleave(make, {2, 2}).cardinality(), kUnknownCardinality);
  EXPECT_THROW(range(4).interleave(make, {0, 1}), InvalidArgument);
}

TEST(FilePipelineTest, ShardKeepsEveryNthAndSkipsLikeIt) {
  EXPECT_EQ(values_of(range(10).shard(3, 1).iterator()), (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(range(10).shard(3, 1).cardinality(), 3);
  EXPECT_EQ(range(10).shard(3, 0).cardinality(), 4);
  EXPECT_EQ(range(2).shard(3, 2).cardinality(), 0);
  auto it = range(10).shard(3, 0).iterator();
  EXPECT_EQ(it.skip(2), 2);
  EXPECT_EQ(values_of(std::move(it)), (std::vector<int64_t>{6, 9}));
  auto past = range(10).shard(3, 2).iterator();
  EXPECT_EQ(past.skip(9), 3);  // 2, 5, 8
  EXPECT_THROW(range(10).shard(3, 3), InvalidArgument);
}

TEST(FilePipelineTest, FromGeneratorReplaysPerEpoch) {
  auto ds = Dataset::from_generator([](int64_t epoch) -> Generator {
    auto count = std::make_shared<int64_t>(0);
    return [count, epoch]() -> std::optional<Element> {
      if (*count == 4) return std::nullopt;
      return Element{torch::tensor(epoch * 10 + (*count)++)};
    };
  });
  EXPECT_EQ(values_of(ds.iterator(2)), (std::vector<int64_t>{20, 21, 22, 23}));
  EXPECT_EQ(values_of(ds.iterator_at({1, 3})), (std::vector<int64_t>{13}));
  EXPECT_EQ(ds.cardinality(), kUnknownCardinality);
}

TEST(FilePipelineTest, IgnoreErrorsSkipsAndCountsFailedElements) {
  auto log = std::make_shared<IgnoredErrors>();
  auto ds = range(10)
                .map(
                    [](Element e) {
                      if (e[0].item<int64_t>() % 4 == 1) throw DataError("odd one out");
                      return e;
                    },
                    MapOptions{2})
                .ignore_errors(log);
  EXPECT_EQ(values_of(ds.iterator()), (std::vector<int64_t>{0, 2, 3, 4, 6, 7, 8}));
  EXPECT_EQ(log->count(), 3);
  EXPECT_EQ(log->first_message(), "odd one out");
  EXPECT_EQ(ds.cardinality(), kUnknownCardinality);
}

TEST(FilePipelineTest, TFRecordDatasetStreamsFilesInOrderAndSkipsExactly) {
  TempDir dir;
  auto files = write_shards(dir, 3, 5);
  auto ds = tfrecord_dataset(files);
  EXPECT_EQ(ds.cardinality(), 15);
  auto all = strings_of(ds.iterator());
  ASSERT_EQ(all.size(), 15u);
  EXPECT_EQ(all.front(), "0:0");
  EXPECT_EQ(all[7], "1:2");
  EXPECT_EQ(all.back(), "2:4");
  for (int64_t at : {0, 3, 5, 6, 14, 15}) {
    auto rest = strings_of(ds.iterator_at({0, at}));
    EXPECT_EQ(rest, std::vector<std::string>(all.begin() + at, all.end())) << "from " << at;
  }
  // Shuffled file order: whole files, a new order per epoch, the same for the same epoch.
  auto shuffled = tfrecord_dataset(files, {Compression::kNone, true, 9});
  std::set<std::string> firsts;
  for (int epoch = 0; epoch < 6; ++epoch) {
    auto order = strings_of(shuffled.iterator(epoch));
    EXPECT_EQ(order, strings_of(shuffled.iterator(epoch)));
    firsts.insert(order.front());
    std::sort(order.begin(), order.end());
    auto sorted = all;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(order, sorted);
  }
  EXPECT_GT(firsts.size(), 1u);
}

TEST(FilePipelineTest, TFRecordDatasetWithSourceNamesFileAndRecord) {
  TempDir dir;
  auto files = write_shards(dir, 2, 2);
  auto it = tfrecord_dataset(files, {Compression::kGzip}).iterator();
  EXPECT_THROW(it.next(), DataError);  // plain files read as gzip: a named error, no crash
  auto e = tfrecord_dataset(files, {Compression::kNone, false, 0, true}).iterator_at({0, 3});
  auto element = e.next();
  ASSERT_TRUE(element);
  EXPECT_EQ(string_of((*element)[0]), "1:1");
  EXPECT_EQ(string_of((*element)[1]), files[1]);
  EXPECT_EQ((*element)[2].item<int64_t>(), 1);
}

TEST(FilePipelineTest, ACorruptRecordIsNamedOrSkipped) {
  TempDir dir;
  auto files = write_shards(dir, 2, 3);
  std::string bytes = testing::read_file(files[0]);
  bytes[12 + 3 + 4 + 12 + 1] ^= 0x40;  // record 1's data ("0:1" follows record 0's 3 bytes)
  testing::write_file(files[0], bytes);
  const std::string message =
      message_of<DataError>([&] { strings_of(tfrecord_dataset(files).iterator()); });
  EXPECT_TRUE(contains(message, files[0])) << message;
  EXPECT_TRUE(contains(message, "record 1")) << message;
  EXPECT_TRUE(contains(message, "CRC")) << message;
  auto log = std::make_shared<IgnoredErrors>();
  auto read = strings_of(tfrecord_dataset(files).ignore_errors(log).iterator());
  // The damaged record alone is skipped: its length held, so the file reads on.
  EXPECT_EQ(read, (std::vector<std::string>{"0:0", "0:2", "1:0", "1:1", "1:2"}));
  EXPECT_EQ(log->count(), 1);
  // A truncated file ends there: the rest of it is one error.
  std::string cut = testing::read_file(files[1]);
  testing::write_file(files[1], cut.substr(0, cut.size() - 20));
  auto log2 = std::make_shared<IgnoredErrors>();
  EXPECT_EQ(strings_of(tfrecord_dataset(files).ignore_errors(log2).iterator()),
            (std::vector<std::string>{"0:0", "0:2", "1:0"}));
  EXPECT_EQ(log2->count(), 2);
}

TEST(FilePipelineTest, ShardFilesGivesEveryFileToExactlyOneWorker) {
  TempDir dir;
  auto files = write_shards(dir, 7, 4);
  for (int workers : {1, 2, 3}) {
    std::multiset<std::string> seen;
    for (int w = 0; w < workers; ++w) {
      auto mine = shard_files(tfrecord_dataset(files).shuffle(8, 1), workers, w);
      for (auto& record : strings_of(mine.iterator(1))) seen.insert(record);
      EXPECT_EQ(source_file_count(mine), (7 - w + workers - 1) / workers);
    }
    EXPECT_EQ(seen.size(), 28u) << workers << " workers";
    EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 28u)
        << workers << " workers: an example read twice";
  }
  // Through list_files and interleave: the file list is what is sharded.
  auto names =
      list_files(dir.file("*.tfrecord"), true, 3)
          .interleave([](const Element& f) { return tfrecord_dataset({string_of(f[0])}); }, {2, 1});
  std::multiset<std::string> seen;
  for (int w = 0; w < 3; ++w)
    for (auto& record : strings_of(shard_files(names, 3, w).iterator())) seen.insert(record);
  EXPECT_EQ(seen.size(), 28u);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 28u);
}

TEST(FilePipelineTest, ShardingByFileRefusesWhatItCannotShard) {
  TempDir dir;
  auto files = write_shards(dir, 2, 1);
  const std::string few =
      message_of<InvalidArgument>([&] { shard_files(tfrecord_dataset(files), 3, 0); });
  EXPECT_TRUE(contains(few, "reads 2 files but there are 3 workers")) << few;
  const std::string none = message_of<InvalidArgument>([&] { shard_files(range(5), 2, 0); });
  EXPECT_TRUE(contains(none, "reads none")) << none;
  EXPECT_EQ(source_file_count(range(5)), -1);
  EXPECT_EQ(source_file_count(tfrecord_dataset(files).batch(2)), 2);
  auto divided = detail::divide_global_batch(tfrecord_dataset(files).batch(4).prefetch(1), 2);
  EXPECT_EQ(divided.describe(), "tfrecord_dataset(2 files).batch(2).prefetch(1)");
  const std::string uneven = message_of<InvalidArgument>(
      [&] { detail::divide_global_batch(tfrecord_dataset(files).batch(5), 2); });
  EXPECT_TRUE(contains(uneven, "does not divide among the 2 workers")) << uneven;
}

// dist-train --ignore-errors counts its records before training: a file whose framing is
// damaged (here truncated) must count the records before the damage, which the reading then
// delivers before the damage is one error, instead of failing the count (issue 68, item 5).
TEST(FilePipelineTest, CountingUpToDamageCountsWhatIgnoreErrorsDelivers) {
  TempDir dir;
  auto files = write_shards(dir, 2, 3);
  const std::string whole = testing::read_file(files[1]);  // 3 records of 19 bytes
  testing::write_file(files[1], whole.substr(0, whole.size() - 20));
  const std::string refused = message_of<DataError>([&] { tfrecord_dataset(files).cardinality(); });
  EXPECT_TRUE(contains(refused, files[1])) << refused;
  EXPECT_TRUE(contains(refused, "truncated")) << refused;
  TFRecordOptions up_to_damage;
  up_to_damage.count_up_to_damage = true;
  auto records = tfrecord_dataset(files, up_to_damage);
  EXPECT_EQ(records.cardinality(), 4);
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto log = std::make_shared<IgnoredErrors>();
    EXPECT_EQ(strings_of(records.ignore_errors(log).iterator(epoch)),
              (std::vector<std::string>{"0:0", "0:1", "0:2", "1:0"}));
    EXPECT_EQ(log->count(), 1);
    EXPECT_TRUE(contains(log->first_message(), "truncated")) << log->first_message();
  }
}

// Once counted, an epoch reads the records counted: a file appended to while a job reads it
// keeps the epoch's length the job planned with (issue 68, item 13).
TEST(FilePipelineTest, RecordsAppendedAfterTheCountAreNotRead) {
  TempDir dir;
  auto files = write_shards(dir, 1, 3);
  auto records = tfrecord_dataset(files);
  ASSERT_EQ(records.cardinality(), 3);
  {
    TFRecordWriter more(dir.file("more.tfrecord"));
    more.write("late:0");
    more.write("late:1");
    more.close();
  }
  testing::write_file(files[0],
                      testing::read_file(files[0]) + testing::read_file(dir.file("more.tfrecord")));
  EXPECT_EQ(strings_of(records.iterator()), (std::vector<std::string>{"0:0", "0:1", "0:2"}));
  EXPECT_EQ(records.skip(1).cardinality(), 2);
  EXPECT_EQ(strings_of(records.skip(1).iterator()), (std::vector<std::string>{"0:1", "0:2"}));
  EXPECT_EQ(tfrecord_dataset(files).cardinality(), 5);  // a new count sees them
}

// A link loop in an image folder (c0/loop -> ..) is refused naming the link, instead of being
// walked 40 levels deep with every image listed again under c0 (issue 68, item 7).
TEST(FilePipelineTest, ImageFolderRefusesALinkLoopNamingIt) {
  TempDir dir;
  for (const std::string name : {"c0/a.png", "c1/b.png"}) {
    std::filesystem::create_directories(std::filesystem::path(dir.file(name)).parent_path());
    testing::write_file(dir.file(name), encode_png(torch::zeros({1, 2, 2}, torch::kByte)));
  }
  std::filesystem::create_directory_symlink("..", dir.file("c0/loop"));
  const std::string message = message_of<DataError>([&] { image_folder(dir.path()); });
  EXPECT_TRUE(contains(message, "loop")) << message;
  EXPECT_TRUE(contains(message, "again")) << message;
  EXPECT_TRUE(contains(message, "class 'c0'")) << message;
  std::filesystem::remove(dir.file("c0/loop"));
  // A link to a folder elsewhere is followed as before.
  std::filesystem::create_directories(dir.file("elsewhere"));
  testing::write_file(dir.file("elsewhere/c.png"),
                      encode_png(torch::zeros({1, 2, 2}, torch::kByte)));
  std::filesystem::create_directories(dir.file("data/c0"));
  std::filesystem::create_directory_symlink(dir.file("elsewhere"), dir.file("data/c0/linked"));
  EXPECT_EQ(image_folder(dir.file("data")).cardinality(), 1);
}

TEST(FilePipelineTest, ImageFolderLabelsBySortedClassFolder) {
  TempDir dir;
  // Class folders out of order on purpose; "zebra" holds a nested folder.
  const std::vector<std::pair<std::string, int>> images = {
      {"zebra/sub/1.png", 3}, {"ant/2.PNG", 1}, {"ant/1.png", 0}, {"moth/a.png", 2}};
  for (const auto& [name, value] : images) {
    std::filesystem::create_directories(std::filesystem::path(dir.file(name)).parent_path());
    testing::write_file(dir.file(name),
                        encode_png(torch::full({1, 2, 3}, value * 50, torch::kByte)));
  }
  testing::write_file(dir.file("ant/readme.txt"), "not an image");
  EXPECT_EQ(image_folder_classes(dir.path()), (std::vector<std::string>{"ant", "moth", "zebra"}));
  auto it = image_folder(dir.path(), {}, {}, 2).iterator();
  std::vector<std::pair<int64_t, int64_t>> got;  // (pixel, label)
  while (auto e = it.next()) {
    EXPECT_EQ((*e)[0].sizes(), (std::vector<int64_t>{1, 2, 3}));
    got.emplace_back((*e)[0][0][0][0].item<int64_t>(), (*e)[1].item<int64_t>());
  }
  // Sorted names: ant/1.png, ant/2.PNG, moth/a.png, zebra/sub/1.png.
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {50, 0}, {100, 1}, {150, 2}}));
  // FILE sharding splits the images; labels go with them.
  auto second = values_of(shard_files(image_folder_files(dir.path()), 2, 1)
                              .map([](Element e) { return Element{e[1]}; })
                              .iterator());
  EXPECT_EQ(second, (std::vector<int64_t>{0, 2}));
}

TEST(FilePipelineTest, ImageFolderNamesEmptyFoldersAndBadFiles) {
  TempDir dir;
  const std::string missing = message_of<DataError>([&] { image_folder(dir.file("none")); });
  EXPECT_TRUE(contains(missing, "does not exist")) << missing;
  const std::string flat = message_of<DataError>([&] { image_folder(dir.path()); });
  EXPECT_TRUE(contains(flat, "has no sub-folders")) << flat;
  std::filesystem::create_directory(dir.file("cat"));
  const std::string empty = message_of<DataError>([&] { image_folder(dir.path()); });
  EXPECT_TRUE(contains(empty, "no images")) << empty;
  testing::write_file(dir.file("cat/broken.png"), "\x89PNG\r\n\x1a\n truncated");
  const std::string broken =
      message_of<DataError>([&] { values_of(image_folder(dir.path()).iterator()); });
  EXPECT_TRUE(contains(broken, dir.file("cat/broken.png"))) << broken;
  ASSERT_EQ(::mkfifo(dir.file("cat/pipe.jpg").c_str(), 0600), 0);
  auto log = std::make_shared<IgnoredErrors>();
  EXPECT_TRUE(values_of(image_folder(dir.path()).ignore_errors(log).iterator()).empty());
  EXPECT_EQ(log->count(), 2);
  EXPECT_TRUE(contains(log->first_message(), "broken.png")) << log->first_message();
}

TEST(FilePipelineTest, ARowShareProducesOnlyItsRowsOfEachGlobalBatch) {
  // 103 examples in global batches of 10 over 3 replicas; this worker holds replica 1: rows
  // [4, 7) of a full batch (split 4, 3, 3) and [1, 2) of the last (3 rows: 1, 1, 1).
  const detail::ReplicaRows own{/*first=*/1, /*count=*/1, /*all=*/3};
  EXPECT_EQ(own.of(10), std::make_pair(int64_t{4}, int64_t{7}));
  EXPECT_EQ(own.of(3), std::make_pair(int64_t{1}, int64_t{2}));
  auto own_rows = [](int64_t rows) {  // the expected rows, by a formula of its own
    const int64_t base = rows / 3, extra = rows % 3;
    const int64_t lo = base + (extra > 0 ? 1 : 0);
    return std::make_pair(lo, lo + base + (extra > 1 ? 1 : 0));
  };
  std::mutex mu;
  std::set<int64_t> computed;
  auto pipeline = [&](int64_t threads) {
    return range(103)
        .shuffle(103, 4)
        .map_with_context(
            [&](Element e, const ElementContext& c) {
              std::lock_guard<std::mutex> lock(mu);
              computed.insert(c.index);
              return Element{e[0] * 2};
            },
            MapOptions{threads})
        .batch(10)
        .prefetch(2);
  };
  for (int64_t threads : {1, 3}) {
    computed.clear();
    auto whole = values_of(pipeline(threads).iterator(1));
    computed.clear();
    auto shared = detail::share_rows(pipeline(threads), own);
    ASSERT_TRUE(shared.has_value());
    EXPECT_EQ(shared->first.cardinality(), 11);
    std::vector<int64_t> expected;
    for (int64_t b = 0; b < 11; ++b) {
      const int64_t rows = b < 10 ? 10 : 3;
      auto [lo, hi] = own_rows(rows);
      for (int64_t r = lo; r < hi; ++r) expected.push_back(whole[b * 10 + r]);
    }
    EXPECT_EQ(values_of(shared->first.iterator(1)), expected) << threads << " threads";
    EXPECT_EQ(computed.size(), expected.size())
        << threads << " threads: the map ran on other workers' rows";
    // Resumed at batch 4, the rest is the same rows.
    EXPECT_EQ(values_of(shared->first.iterator_at({1, 4})),
              std::vector<int64_t>(expected.begin() + 12, expected.end()));
    EXPECT_EQ(shared->second->rows_of_batch(10), 3);
  }
  // A worker without rows in a batch gets an empty batch with the right shape.
  // (Replica 4 of 5: batches of 4 rows split 1, 1, 1, 1, 0.)
  auto none = detail::share_rows(range(12).batch(4), detail::ReplicaRows{4, 1, 5});
  ASSERT_TRUE(none.has_value());
  auto empty = none->first.iterator().next();
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ((*empty)[0].size(0), 0);
  // Unknown size (ignore_errors) or no batch at the output: no row share.
  EXPECT_FALSE(detail::share_rows(range(12).ignore_errors().batch(4), own).has_value());
  EXPECT_FALSE(
      detail::share_rows(range(12).batch(4).map([](Element e) { return e; }), own).has_value());
}

}  // namespace
}  // namespace dist::data
