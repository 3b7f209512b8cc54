#include "ps/embedding_model.h"

#include "dist/core/error.h"
#include "dist/train/checkpoint.h"
#include "dist/train/loss.h"

namespace dist::testing {

EmbeddingNetImpl::EmbeddingNetImpl(int64_t rows, int64_t dim)
    : table(register_module("table", ShardedEmbedding(rows, dim))),
      out(register_module("out", torch::nn::Linear(dim, 10))) {}

at::Tensor EmbeddingNetImpl::forward(const at::Tensor& ids) { return out(table(ids).mean(1)); }

namespace {

std::pair<at::Tensor, at::Tensor> embedding_examples(int64_t rows, int64_t steps,
                                                     int64_t id_limit = 0) {
  if (id_limit > 0) rows = std::min(rows, id_limit);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1234);
  const int64_t n = steps * kEmbeddingBatch;
  // Ids from a small range of the table half the time, so batches repeat ids.
  at::Tensor wide = torch::randint(rows, {n, kIdsPerExample}, generator, torch::kLong);
  at::Tensor narrow =
      torch::randint(std::min<int64_t>(rows, 50), {n, kIdsPerExample}, generator, torch::kLong);
  at::Tensor ids = torch::where(torch::rand({n, kIdsPerExample}, generator) < 0.5, narrow, wide);
  at::Tensor labels = ids.sum(1).remainder(10);
  return {ids, labels};
}

}  // namespace

data::Dataset embedding_data(int64_t rows, int64_t steps, int64_t id_limit) {
  auto [ids, labels] = embedding_examples(rows, steps, id_limit);
  return data::Dataset::from_tensor_slices({ids, labels}).batch(kEmbeddingBatch);
}

int64_t distinct_ids_in_batch(int64_t rows, int64_t steps, int64_t step) {
  const at::Tensor ids = embedding_examples(rows, steps)
                             .first.slice(0, step * kEmbeddingBatch, (step + 1) * kEmbeddingBatch);
  return std::get<0>(at::_unique(ids.reshape({-1}))).numel();
}

std::shared_ptr<MirroredOptimizer> make_embedding_optimizer(const Strategy& strategy,
                                                            const Mirrored<EmbeddingNet>& model,
                                                            const std::string& kind) {
  if (kind == "adagrad")
    return strategy.mirror_optimizer<torch::optim::Adagrad>(model,
                                                            torch::optim::AdagradOptions(0.1));
  DIST_CHECK_ARG(kind == "sgd", "embedding optimizer '", kind, "': use sgd or adagrad");
  return strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
}

std::vector<std::pair<std::string, torch::Tensor>> train_embedding_steps(
    const Strategy& strategy, int64_t rows, int64_t dim, int64_t steps, const std::string& kind,
    int64_t id_limit, const std::string& checkpoint) {
  torch::manual_seed(7);
  auto model = strategy.mirror(EmbeddingNet(rows, dim));
  auto optimizer = make_embedding_optimizer(strategy, model, kind);
  SparseCategoricalCrossentropy loss_fn(true, Reduction::kNone);
  for (const auto& batch :
       strategy.experimental_distribute_dataset(embedding_data(rows, steps, id_limit)).iterator()) {
    strategy.run(
        [&](const data::Element& b) {
          auto loss = compute_average_loss(loss_fn(b[1], model->forward(b[0])));
          loss.backward();
          optimizer->apply_gradients();
        },
        batch);
  }
  if (!checkpoint.empty()) Checkpoint(model, optimizer.get()).write(checkpoint);
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  for (const auto& p : model.primary()->named_parameters())
    weights.emplace_back(p.key(), p.value().detach().clone());
  return weights;
}

}  // namespace dist::testing
