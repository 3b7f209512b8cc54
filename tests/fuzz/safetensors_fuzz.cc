// Fuzzes dist::load_safetensors on raw file bytes.
#include <torch/torch.h>

#include "dist/train/safetensors.h"
#include "fuzz_util.h"

namespace {

void write_seeds(const std::string& dir) {
  const std::string path = dir + "/tensors.safetensors";
  dist::save_safetensors(path,
                         {{"f32", torch::arange(6, torch::kFloat).reshape({2, 3})},
                          {"i64", torch::tensor({int64_t{-1}, int64_t{7}})},
                          {"bool", torch::tensor({true, false, true})},
                          {"f16", torch::ones({2}, torch::kHalf)},
                          {"scalar", torch::scalar_tensor(3.5, torch::kDouble)},
                          {"empty", torch::zeros({0, 4}, torch::kByte)}},
                         {{"format", "test"}, {"note", "seed"}});
  dist::save_safetensors(dir + "/no_metadata.safetensors", {{"x", torch::ones({1})}});
  dist::save_safetensors(dir + "/empty.safetensors", {});
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dist::fuzz::write_seeds_if_asked(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = dist::fuzz::scratch_path("safetensors");
  dist::fuzz::write_file(path, std::string(reinterpret_cast<const char*>(data), size));
  dist::fuzz::expect_only_dist_errors([&] {
    dist::SafetensorsFile file = dist::load_safetensors(path);
    // Touch every byte of every tensor, so ASan sees one smaller than its shape claims.
    for (const auto& [name, t] : file.tensors)
      if (t.numel() > 0) (void)t.to(torch::kDouble).sum().item<double>();
  });
  return 0;
}
