// Fuzzes dist::data::parse_example (tf.train.Example's wire format) against a spec with every
// kind of feature: fixed-length int64 with a default, fixed float, fixed bytes, var-length
// int64 and float.
#include <ATen/ATen.h>

#include "dist/data/example.h"
#include "fuzz_util.h"

namespace {

using dist::data::FeatureType;
using dist::data::FixedLenFeature;
using dist::data::VarLenFeature;

const dist::data::FeatureSpec& spec() {
  static const dist::data::FeatureSpec kSpec({
      FixedLenFeature("label", FeatureType::kInt64, {}, at::scalar_tensor(7, at::kLong)),
      FixedLenFeature("box", FeatureType::kFloat, {2, 2}),
      FixedLenFeature("image", FeatureType::kBytes, {}),
      VarLenFeature("ids", FeatureType::kInt64),
      VarLenFeature("scores", FeatureType::kFloat),
  });
  return kSpec;
}

void write_seeds(const std::string& dir) {
  dist::data::ExampleBuilder full;
  full.add_int64("label", std::vector<int64_t>{3});
  full.add_float("box", std::vector<float>{0.f, 1.f, 2.f, 3.f});
  full.add_bytes("image", std::string("\x89PNG", 4));
  full.add_int64("ids", std::vector<int64_t>{1, -2, 1LL << 40});
  full.add_float("scores", std::vector<float>{0.5f});
  dist::fuzz::write_seed(dir, "full", full.serialize());
  dist::data::ExampleBuilder defaults;
  defaults.add_float("box", std::vector<float>{4.f, 5.f, 6.f, 7.f});
  defaults.add_bytes("image", std::string());
  dist::fuzz::write_seed(dir, "defaults", defaults.serialize());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dist::fuzz::write_seeds_if_asked(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  dist::fuzz::expect_only_dist_errors([&] {
    for (const at::Tensor& t : dist::data::parse_example(bytes, spec()))
      if (t.numel() > 0) (void)t.to(at::kDouble).sum().item<double>();  // ASan sees every value
  });
  return 0;
}
