// Reading a sealed checkpoint file in ranges (train/sealed_file.h): a reader that keeps a range
// of a tensor gets exactly those elements, from a tensor larger than the buffer it passes
// through, and the checksums still cover every byte, inside the range or not.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <string>

#include "dist/train/safetensors.h"
#include "test_util.h"
#include "train/checkpoint_checksums.h"
#include "train/safetensors_reader.h"
#include "train/sealed_file.h"

namespace dist {
namespace {

// 3M floats (12 MB): three of the reader's 4 MiB pieces, the last one short.
const int64_t kElements = 3'000'000;

std::string write_sealed(const testing::TempDir& dir) {
  const std::string path = dir.file("sealed.safetensors");
  detail::CheckpointTensors tensors{
      {"big", torch::arange(kElements, torch::kFloat).view({1000, 3000})},
      {"counter", torch::scalar_tensor(7, torch::kLong)}};
  std::map<std::string, std::string> meta{{"format", "test"}};
  detail::seal_checkpoint(tensors, meta);
  save_safetensors(path, tensors, meta);
  return path;
}

detail::WantedRanges keep(detail::ElementRange range) {
  return [range](const std::string& name) -> std::optional<detail::ElementRange> {
    if (name == "big") return range;
    return std::nullopt;
  };
}

TEST(SealedFileTest, AReaderGetsOnlyItsRangeAcrossPiecesAndTheWholeShape) {
  testing::TempDir dir;
  const detail::SafetensorsReader file(write_sealed(dir), Env::Default());
  // From inside the first 4 MiB piece to inside the third.
  const detail::ElementRange range{1'000'003, 1'500'000};
  detail::CheckedTensors out;
  ASSERT_EQ(detail::read_checked_tensors(file, keep(range), out), "");
  EXPECT_TRUE(torch::equal(out.tensors.at("big"),
                           torch::arange(range.begin, range.begin + range.count, torch::kFloat)));
  EXPECT_EQ(out.whole_shapes.at("big"), (std::vector<int64_t>{1000, 3000}));
  EXPECT_EQ(out.tensors.at("counter").item<int64_t>(), 7);
  EXPECT_EQ(out.whole_shapes.count("counter"), 0u);
  // A range that does not fit the tensor: read whole, for the reader's shape check to name.
  detail::CheckedTensors whole;
  ASSERT_EQ(detail::read_checked_tensors(file, keep({kElements - 1, 2}), whole), "");
  EXPECT_EQ(whole.tensors.at("big").sizes(), (std::vector<int64_t>{1000, 3000}));
  EXPECT_TRUE(whole.whole_shapes.empty());
  // An empty range (a worker that keeps none of it).
  detail::CheckedTensors none;
  ASSERT_EQ(detail::read_checked_tensors(file, keep({kElements, 0}), none), "");
  EXPECT_EQ(none.tensors.at("big").numel(), 0);
}

TEST(SealedFileTest, DamageOutsideTheRangeIsFoundAllTheSame) {
  testing::TempDir dir;
  const std::string path = write_sealed(dir);
  {
    // The last element of "big", far from the range kept below.
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const detail::SafetensorsReader file(path, Env::Default());
    f.seekp(static_cast<std::streamoff>(file.entries().at(0).offset + 4 * (kElements - 1)));
    f.put('\x7f');
  }
  const detail::SafetensorsReader file(path, Env::Default());
  detail::CheckedTensors out;
  EXPECT_EQ(detail::read_checked_tensors(file, keep({0, 10}), out),
            "tensor 'big': its data does not match its checksum: the file is damaged");
}

}  // namespace
}  // namespace dist
