// The embedding model of the ParameterServerStrategy tests: a ShardedEmbedding table whose
// rows are averaged per example, then a linear layer; shared by the in-process reference
// (one device) and the job's tasks (ps_task_main.cc), so both train on the same batches.
#pragma once

#include <torch/torch.h>

#include "dist/data/dataset.h"
#include "dist/distribute/sharded_embedding.h"
#include "dist/distribute/strategy.h"

namespace dist::testing {

class EmbeddingNetImpl : public torch::nn::Module {
 public:
  EmbeddingNetImpl(int64_t rows, int64_t dim);
  // ids [batch, kIdsPerExample] -> logits [batch, 10]
  at::Tensor forward(const at::Tensor& ids);

  ShardedEmbedding table{nullptr};
  torch::nn::Linear out{nullptr};
};
TORCH_MODULE(EmbeddingNet);

constexpr int64_t kIdsPerExample = 4;
constexpr int64_t kEmbeddingBatch = 32;

// `steps` batches of kEmbeddingBatch examples, each kIdsPerExample ids in [0, id_limit)
// (id_limit 0: the whole table; some ids repeat within a batch, so lookups hold duplicates)
// and a label; the same on every call.
data::Dataset embedding_data(int64_t rows, int64_t steps, int64_t id_limit = 0);

// The distinct ids of batch `step` of embedding_data(rows, steps).
int64_t distinct_ids_in_batch(int64_t rows, int64_t steps, int64_t step);

// "sgd": SGD(0.1); "adagrad": Adagrad(0.1). InvalidArgument for another name.
std::shared_ptr<MirroredOptimizer> make_embedding_optimizer(const Strategy& strategy,
                                                            const Mirrored<EmbeddingNet>& model,
                                                            const std::string& kind);

// `steps` steps of EmbeddingNet(rows, dim) (seed 7) with make_embedding_optimizer(kind) over
// embedding_data(rows, steps, id_limit) under `strategy`; returns the named parameters and, if
// `checkpoint` is not empty, writes Checkpoint(model, optimizer) there.
std::vector<std::pair<std::string, torch::Tensor>> train_embedding_steps(
    const Strategy& strategy, int64_t rows, int64_t dim, int64_t steps,
    const std::string& kind = "sgd", int64_t id_limit = 0, const std::string& checkpoint = "");

}  // namespace dist::testing
