// Checkpoint::read and a damaged random generator state (found by tests/fuzz/checkpoint_fuzz):
// LibTorch's Generator::set_state threw c10::Error after the model had already been changed.
#include <cstdio>
#include <sstream>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/crc32c.h"
#include "dist/core/error.h"
#include "dist/train/checkpoint.h"
#include "dist/train/safetensors.h"
#include "test_util.h"

namespace dist {
namespace {

using testing::TempDir;

std::string hex(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", value);
  return text;
}

// Saves `file` with its checksums recomputed as Checkpoint::write computes them, so that only the
// tensor's content is wrong, not its checksum.
void save_resealed(const std::string& path, SafetensorsFile file) {
  for (const auto& [name, t] : file.tensors) {
    at::Tensor c = t.contiguous();
    file.metadata["crc32c/" + name] = hex(crc32c(c.data_ptr(), c.numel() * c.element_size()));
  }
  std::ostringstream text;
  for (const auto& [name, t] : file.tensors)
    text << name << '\0' << t.scalar_type() << t.sizes() << '\0';
  for (const auto& [key, value] : file.metadata)
    if (key != "header_crc32c") text << key << '\0' << value << '\0';
  const std::string header = text.str();
  file.metadata["header_crc32c"] = hex(crc32c(header.data(), header.size()));
  save_safetensors(path, file.tensors, file.metadata);
}

class CheckpointRngTest : public ::testing::TestWithParam<int> {};

// 0: the right size but all zeros (mt19937 "not seeded"); 1: the wrong size; 2: the wrong dtype.
TEST_P(CheckpointRngTest, DamagedGeneratorStateIsDataErrorBeforeAnyChange) {
  TempDir dir;
  torch::nn::Linear model(3, 2);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
  Checkpoint checkpoint(model.ptr(), &adam);
  checkpoint.write(dir.file("good.safetensors"));

  SafetensorsFile file = load_safetensors(dir.file("good.safetensors"));
  bool found = false;
  for (auto& [name, t] : file.tensors) {
    if (name != "rng/cpu") continue;
    found = true;
    if (GetParam() == 0) t = torch::zeros_like(t);
    if (GetParam() == 1) t = torch::zeros({10}, torch::kByte);
    if (GetParam() == 2) t = t.to(torch::kInt);
  }
  ASSERT_TRUE(found);
  const std::string bad = dir.file("bad.safetensors");
  save_resealed(bad, file);

  torch::NoGradGuard no_grad;
  model->weight.fill_(7);
  try {
    checkpoint.read(bad);
    ADD_FAILURE() << "a damaged generator state was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("rng/cpu"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(model->weight.eq(7).all().item<bool>()) << "the model changed before the error";
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, CheckpointRngTest, ::testing::Values(0, 1, 2));

}  // namespace
}  // namespace dist
