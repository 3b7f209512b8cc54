// Time to decode one encoded image with dist::data::decode_image, on one thread: JPEG of a
// 28x28 grey image (MNIST-sized) and of a 224x224 RGB image (ImageNet-sized), PNG of a 28x28
// grey image; also a 224x224 PNG and a 256x256 JPEG resized to 224x224 for comparison. The
// images are encoded first (encode_jpeg at quality 95, encode_png) from photo-like pixels:
// smooth gradients plus noise, since decode time depends on how much detail survives.
//
//   ./build/bench/image_decode_bench [--benchmark_repetitions=5 ...]
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <string>

#include "dist/data/image_codec.h"
#include "dist/train/image_io.h"

namespace {

using dist::data::DecodeImageOptions;

at::Tensor photo_like(int64_t channels, int64_t size) {
  torch::manual_seed(0);
  auto ramp = torch::linspace(0, 200, size);
  auto base = (ramp.unsqueeze(1) * 0.6 + ramp.unsqueeze(0) * 0.4).expand({channels, size, size});
  auto shade = torch::arange(channels).reshape({channels, 1, 1}) * 20;
  return (base + shade + torch::randn({channels, size, size}) * 12).clamp(0, 255).to(torch::kUInt8);
}

void decode(benchmark::State& state, const std::string& bytes, DecodeImageOptions options) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  for (auto _ : state)
    benchmark::DoNotOptimize(dist::data::decode_image(data, bytes.size(), options));
  state.SetItemsProcessed(state.iterations());
  state.counters["encoded_bytes"] = static_cast<double>(bytes.size());
}

void BM_JpegGrey28(benchmark::State& state) {
  decode(state, dist::data::encode_jpeg(photo_like(1, 28)), {});
}
void BM_JpegRgb224(benchmark::State& state) {
  decode(state, dist::data::encode_jpeg(photo_like(3, 224)), {});
}
void BM_PngGrey28(benchmark::State& state) {
  decode(state, dist::encode_png(photo_like(1, 28)), {});
}
void BM_PngRgb224(benchmark::State& state) {
  decode(state, dist::encode_png(photo_like(3, 224)), {});
}
void BM_JpegRgb256ResizedTo224(benchmark::State& state) {
  decode(state, dist::data::encode_jpeg(photo_like(3, 256)), {3, 224, 224});
}

BENCHMARK(BM_JpegGrey28);
BENCHMARK(BM_JpegRgb224);
BENCHMARK(BM_PngGrey28);
BENCHMARK(BM_PngRgb224);
BENCHMARK(BM_JpegRgb256ResizedTo224);

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);  // per-image cost; data loaders decode one image per thread
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
