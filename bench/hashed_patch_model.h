// An embedding-heavy model on real Fashion-MNIST for the ParameterServerStrategy benchmark:
// each image becomes 16 ids (its 4 x 4 grid of 7 x 7 patches, each binarized at 0.5 and hashed
// with its position into a 1,000,000-row table), the 16 rows are averaged, a linear layer
// classifies. A step of 64 images names at most 1024 rows (far fewer distinct ones: empty
// background patches share ids) of a 256 MB table: the case where sparse updates on parameter
// servers should beat a dense all-reduce of the whole table's gradient.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/distribute/sharded_embedding.h"

namespace dist::bench {

constexpr int64_t kHashBuckets = 1000000;
constexpr int64_t kEmbeddingDim = 64;

// images [N, 1, 28, 28] in [0, 1] -> ids [N, 16] in [0, buckets): a parameterless layer, so the
// datasets, the evaluation and the strategies see an ordinary image model.
class HashedPatchesImpl : public torch::nn::Cloneable<HashedPatchesImpl> {
 public:
  explicit HashedPatchesImpl(int64_t buckets = kHashBuckets) : buckets_(buckets) {}
  void reset() override {}
  at::Tensor forward(const at::Tensor& images) {
    DIST_CHECK_ARG(images.dim() == 4 && images.size(2) == 28 && images.size(3) == 28,
                   "HashedPatches: images must be [N, 1, 28, 28], got ", images.sizes());
    const int64_t n = images.size(0);
    // [N, 4 rows of patches, 7, 4 columns of patches, 7] -> [N, 16, 49] bits
    const at::Tensor bits = (images.reshape({n, 4, 7, 4, 7}) > 0.5)
                                .permute({0, 1, 3, 2, 4})
                                .reshape({n, 16, 49})
                                .to(at::kLong)
                                .contiguous();
    at::Tensor ids = at::empty({n, 16}, at::kLong);
    const int64_t* b = bits.data_ptr<int64_t>();
    int64_t* out = ids.data_ptr<int64_t>();
    for (int64_t i = 0; i < n * 16; ++i) {
      uint64_t code = 0;
      for (int64_t j = 0; j < 49; ++j) code |= static_cast<uint64_t>(b[i * 49 + j]) << j;
      // splitmix64 of the patch's bits and its position
      uint64_t h = code + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(i % 16 + 1);
      h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;
      h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
      h ^= h >> 31;
      out[i] = static_cast<int64_t>(h % static_cast<uint64_t>(buckets_));
    }
    return ids;
  }

 private:
  int64_t buckets_;
};
TORCH_MODULE(HashedPatches);

// HashedPatches -> ShardedEmbedding(1,000,000 x 64) -> mean of the 16 rows -> Linear(64, 10).
inline torch::nn::Sequential make_hashed_patch_model() {
  return torch::nn::Sequential(
      HashedPatches(), ShardedEmbedding(kHashBuckets, kEmbeddingDim),
      torch::nn::Functional([](const at::Tensor& rows) { return rows.mean(1); }),
      torch::nn::Linear(kEmbeddingDim, 10));
}

}  // namespace dist::bench
