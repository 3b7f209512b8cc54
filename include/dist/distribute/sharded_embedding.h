// ShardedEmbedding: an embedding table that ParameterServerStrategy can keep split over its ps
// tasks and read a few rows at a time (tf.keras.layers.Embedding over a ShardedVariable).
//
// Under any other strategy it is an ordinary embedding layer: its forward reads rows of the
// local table and its gradient is the dense [num_rows, dim] tensor every strategy already
// reduces. Under ParameterServerStrategy a step does not read the table whole (a 1,000,000-row
// table would cross the wire every step): forward asks the ps tasks for the distinct rows the
// step's ids name, and the gradient goes back as those rows only, which the ps task applies
// as a sparse update (SGD without momentum or weight decay, or Adagrad). Split the table with
// ParameterServerOptions::partitioner to spread its rows over several ps tasks.
//
//   struct Net : torch::nn::Module {
//     dist::ShardedEmbedding words{register_module("words", dist::ShardedEmbedding(1000000, 64))};
//     torch::nn::Linear out{register_module("out", torch::nn::Linear(64, 10))};
//     at::Tensor forward(const at::Tensor& ids) { return out(words(ids).mean(1)); }
//   };
//
// Both paths compute the same arithmetic (gather the distinct rows, then expand them to the
// ids), so one worker and one ps reproduce one-device training exactly.
#pragma once

#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

namespace dist {

class ParameterServerExtended;

struct ShardedEmbeddingOptions {
  ShardedEmbeddingOptions(int64_t num_rows, int64_t dim) : num_rows(num_rows), dim(dim) {}
  int64_t num_rows;
  int64_t dim;
  // Initial values are uniform in [-init_range, init_range] (Keras' Embedding default).
  double init_range = 0.05;
};

class ShardedEmbeddingImpl : public torch::nn::Cloneable<ShardedEmbeddingImpl> {
 public:
  ShardedEmbeddingImpl(int64_t num_rows, int64_t dim)
      : ShardedEmbeddingImpl(ShardedEmbeddingOptions(num_rows, dim)) {}
  explicit ShardedEmbeddingImpl(ShardedEmbeddingOptions options);

  void reset() override;
  // `ids`: integer row numbers of any shape, each in [0, num_rows). Returns [ids..., dim].
  // InvalidArgument ("ShardedEmbedding: ...", with the id) for a non-integer id or one
  // outside the table.
  at::Tensor forward(const at::Tensor& ids);

  const ShardedEmbeddingOptions& options() const { return options_; }
  // The table, [num_rows, dim]. Under ParameterServerStrategy a step never reads it; outside
  // steps it holds the values of the last whole read (model.variables().prepare_to_read(), as
  // a checkpoint does), so a chief can evaluate locally after one.
  at::Tensor weight;

 private:
  friend class ParameterServerExtended;
  // Rows `ids` (distinct, sorted) of the table as the strategy holds it, or an undefined
  // tensor where the local table holds them (outside a step).
  using RowSource = std::function<at::Tensor(const at::Tensor& ids)>;
  struct Lookup {
    at::Tensor ids;   // distinct rows asked for
    at::Tensor rows;  // their values, a leaf whose gradient backward() fills
  };
  void set_row_source(RowSource source);
  // The lookups since the last call (the step's), and forgets them.
  std::vector<Lookup> take_lookups();

  // What a strategy attached: a copy (clone() makes one per replica) has the options and the
  // table, never another layer's row source or lookups.
  struct Attached {
    Attached() = default;
    Attached(const Attached&) {}
    Attached& operator=(const Attached&) { return *this; }
    RowSource row_source;
    std::mutex mutex;  // guards lookups
    std::vector<Lookup> lookups;
  };

  ShardedEmbeddingOptions options_;
  Attached attached_;
};
TORCH_MODULE(ShardedEmbedding);

}  // namespace dist
