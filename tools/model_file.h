// dist-train's model: the built-in --model, or --model-file, a TorchScript classifier written
// in Python (dist/models/torchscript_model.h), for both loops and the evaluator.
//
// A scripted module trains under every strategy as the built-in models do: the custom loop
// holds it as the one child of a torch::nn::Sequential (so that --sharding parameters gathers
// it whole, as one layer), fit as one Keras layer ("torchscript"). Its checkpoints name its
// tensors under that child; --save-weights and --save-torchscript use the module's own
// (Python's state_dict) names. What it cannot do is refused by name (train_options.cc); see
// docs/dist-train.md, "Models from Python".
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/modules/container/sequential.h>

#include "dist/data/dataset.h"
#include "dist/keras/model.h"
#include "dist/models/model_input.h"
#include "dist/models/torchscript_model.h"
#include "train_options.h"
#include "training_data.h"

namespace dist::tools {

// --model-file, loaded and checked by one forward on a batch of the data's first image made
// ready as training makes it (image_preparation.h). Without --channels the forward finds the
// channels the module takes: the first image's, else the other count (1 or 3). Every bad file
// (missing, not TorchScript, truncated or damaged, newer than this LibTorch, no forward, no
// trainable parameters, an integer parameter, a forward that fails on the batch or returns
// anything but float N x classes logits, the classes of `shape`) is an InvalidArgument that
// names --model-file, the file and what to do (dist-train: exit 2, before anything is
// written); a class count that differs names both counts and where each came from. A SIGTERM
// or SIGINT during the forward is StopRequested at once (exit 4); the forward, which cannot be
// interrupted, runs on in a thread of its own until the process exits.
// With --features the forward is checked on two copies of the first record's row [2, F] and
// must return float [2, outputs]: the classes' logits, or --task regress's label values.
struct ModelFile {
  models::TorchScriptModule module{nullptr};
  std::vector<int64_t> example_shape;  // one image's C, H, W (--features: F), as the data gives it
  int64_t classes = 0;                 // the outputs per example: logits, or regressed values
  bool channels_from_forward = false;  // the channels found by trying the forward
};
ModelFile load_model_file(const TrainOptions& options, const DataShape& shape);

// What the job's header says of a scripted module that the strategy changes: its batch norms
// per replica (with several), --sharding parameters gathering it whole.
void describe_model_file(const ModelFile& file, const TrainOptions& options, int replicas,
                         std::ostream& out);

// The custom loop's model, from `options.seed`: the built-in --model built for `input`, or a
// deep copy of `file`'s module (given with --model-file) as the one child of a Sequential.
torch::nn::Sequential make_job_model(const TrainOptions& options, const ModelFile* file,
                                     const models::ImageModelInput& input = {});
// fit's: the built-in --model's Keras twin, or `file`'s module as one Keras layer.
keras::Model make_job_keras_model(const TrainOptions& options, const ModelFile* file,
                                  const models::ImageModelInput& input = {});

// The scripted module inside a model that make_job_model or make_job_keras_model made (or
// null when it holds none).
const models::TorchScriptModuleImpl* scripted_module_of(const torch::nn::Module& model);

// The weights to save or show, by the names a user knows: a scripted module's own (Python's
// state_dict keys), or the built-in model's.
std::vector<std::pair<std::string, at::Tensor>> named_weights_of(const torch::nn::Module& model);

// The trained model's files, on the chief once its values are whole and current: --save-weights
// (safetensors; a scripted module's under its own names, so that Python's load_state_dict reads
// them) and --save-torchscript. `model`: make_job_model's primary copy (the custom loop's) or a
// Keras model's module; `metadata` goes into the safetensors file of a built-in model.
void save_trained_model(const TrainOptions& options, const torch::nn::Module& model,
                        const std::map<std::string, std::string>& metadata);

}  // namespace dist::tools
