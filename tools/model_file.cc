#include "model_file.h"

#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "dist/core/error.h"
#include "dist/keras/layers.h"
#include "dist/models/keras_models.h"
#include "dist/models/reference_models.h"
#include "dist/models/torchscript_layer.h"
#include "dist/models/torchscript_signature.h"
#include "dist/train/preemption.h"
#include "dist/train/safetensors.h"

namespace dist::tools {
namespace {

// The name of the Keras layer that holds the scripted module (its weights: "torchscript.*").
constexpr const char* kLayerName = "torchscript";

// `e`'s message as --model-file's: exit 2 (a bad command line), naming the flag.
[[noreturn]] void refuse_model_file(const std::exception& e) {
  throw InvalidArgument(detail::concat("--model-file: ", e.what()));
}

bool has_batch_norm(const models::TorchScriptModuleImpl& module) {
  for (const auto& buffer : module.named_buffers()) {
    const std::string& name = buffer.key();
    const std::string suffix = "running_mean";
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  }
  return false;
}

// The process's end once a forward was left running (below): static destructors would take
// LibTorch's globals (its operator registry, its thread pools) from under that forward, and
// the exit could crash instead of ending with the code of a stop. Registered when the forward
// is left, this runs before the destructors of all LibTorch built earlier (exit handlers run
// last registered first), after main has unwound and printed why it stopped, and ends the
// process with dist-train's code for a stop (dist_train.cc), which is the only way out of a
// StopRequested.
void exit_stopped_before_static_destructors() {
  std::cout.flush();
  std::fflush(nullptr);
  std::_Exit(4);
}

// A forward check (`check`, which returns the module's output) on a thread of its own: a
// module's forward may take long (a large module, a loop in the scripted code), and a SIGTERM
// meanwhile must end the start-up within a fraction of a second (exit 4), as it does every
// other wait of the start-up. The scripted forward cannot be interrupted, so on a signal it is
// left to run on alone, with its own references to the module and the inputs, until the
// process exits.
using ForwardCheck = std::function<at::Tensor(models::TorchScriptModuleImpl&)>;
at::Tensor check_forward_unless_stopped(const models::TorchScriptModule& module,
                                        ForwardCheck check_forward) {
  PreemptionWatcher stop;  // shares the start-up's watcher; installs one where none is
  auto check = std::make_shared<std::packaged_task<at::Tensor()>>(
      [script = module.ptr(), check_forward] { return check_forward(*script); });
  std::future<at::Tensor> checked = check->get_future();
  std::thread([check] { (*check)(); }).detach();
  const auto poll = std::chrono::milliseconds(50);
  while (!stop.requested() && checked.wait_for(poll) != std::future_status::ready) continue;
  // Looked at after the check too: a signal that came meanwhile is not lost.
  if (stop.requested()) {
    if (checked.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
      std::atexit(exit_stopped_before_static_destructors);
    throw StopRequested(
        detail::concat("stopped by ", stop.signal_number() == SIGINT ? "SIGINT" : "SIGTERM",
                       " while checking the forward of --model-file ", module->file()));
  }
  return checked.get();  // the check's InvalidArgument, if it refused the module
}

// The check of an image classifier: float N x classes logits.
ForwardCheck image_check(const at::Tensor& images) {
  return [images](models::TorchScriptModuleImpl& script) {
    return models::check_classifier_forward(script, images, /*classes=*/-1);
  };
}

// The check for --features: the forward takes the rows [N, F] and returns float N x outputs.
ForwardCheck rows_check(const at::Tensor& rows) {
  return [rows](models::TorchScriptModuleImpl& script) {
    const models::ForwardReport report =
        models::check_forward(script, std::vector<at::Tensor>{rows});
    const c10::IValue& out = report.output;
    const bool fits = out.isTensor() && out.toTensor().is_floating_point() &&
                      out.toTensor().dim() == 2 && out.toTensor().size(0) == rows.size(0);
    DIST_CHECK_ARG(fits, report.description,
                   "; the forward must return float N x outputs (one row per example: the "
                   "classes' logits, or the values --task regress predicts)");
    return out.toTensor();
  };
}

// Two copies of the first image, made ready as training makes them with `channels`: the batch
// the forward is checked on (two rows, so that a forward that reduces over the batch shows).
at::Tensor sample_batch(const TrainOptions& options, const DataShape& shape, int64_t channels) {
  const ImagePreparation prepare = image_preparation(options, shape.first, channels);
  const at::Tensor image = prepare(convert_channels(shape.first, channels), {}, /*training=*/false,
                                   "the first training image");
  return at::stack({image, image});
}

// The module's outputs per example against the data's classes or targets.
void check_outputs(const ModelFile& file, const TrainOptions& options, const DataShape& shape) {
  if (shape.targets > 0) {
    DIST_CHECK_ARG(file.classes == shape.targets, "--model-file ", options.model_file,
                   ": the module's forward returns ", file.classes,
                   " values per example but --label-feature '", options.label_feature, "' has ",
                   shape.targets,
                   " (--task regress predicts the label's values); give a module with one "
                   "output per label value");
    return;
  }
  DIST_CHECK_ARG(file.classes == shape.classes, "--model-file ", options.model_file,
                 ": the module's forward returns ", file.classes, " logits per ",
                 shape.has_features() ? "example" : "image", " (its classes) but the data has ",
                 shape.classes, " classes (", shape.classes_source,
                 "); give a module with one logit per class, or --num-classes ", file.classes,
                 " if the data's classes are that many");
}

}  // namespace

ModelFile load_model_file(const TrainOptions& options, const DataShape& shape) {
  ModelFile file;
  try {
    file.module = models::load_torchscript(options.model_file, options.env);
  } catch (const DataError& e) {
    refuse_model_file(e);
  } catch (const InvalidArgument& e) {
    refuse_model_file(e);
  }
  if (shape.has_features()) {
    try {
      const at::Tensor rows = at::stack({shape.first_row, shape.first_row});
      file.classes = check_forward_unless_stopped(file.module, rows_check(rows)).size(1);
      file.example_shape = {rows.size(1)};
    } catch (const InvalidArgument& e) {
      refuse_model_file(e);
    }
    check_outputs(file, options, shape);
    return file;
  }
  // The channels: --channels, else the first image's, else the other count, whichever the
  // module's forward takes.
  std::vector<int64_t> channels{options.images.channels};
  if (channels[0] == 0) channels = {shape.first.size(0), shape.first.size(0) == 1 ? 3 : 1};
  at::Tensor logits, images;
  std::optional<InvalidArgument> first_refusal;  // what the first count's forward said
  for (size_t i = 0; i < channels.size() && !logits.defined(); ++i) {
    try {
      images = sample_batch(options, shape, channels[i]);
      logits = check_forward_unless_stopped(file.module, image_check(images));
      file.channels_from_forward = i > 0;
    } catch (const InvalidArgument& e) {
      if (!first_refusal) first_refusal = e;
    }
  }
  if (!logits.defined()) refuse_model_file(*first_refusal);
  file.example_shape = images.sizes().slice(1).vec();
  file.classes = logits.size(1);
  check_outputs(file, options, shape);
  return file;
}

void describe_model_file(const ModelFile& file, const TrainOptions& options, int replicas,
                         std::ostream& out) {
  const bool rows = file.example_shape.size() == 1;
  out << "Model: TorchScript module " << options.model_file << (rows ? " (rows " : " (images ")
      << keras::shape_to_string(file.example_shape) << " -> " << file.classes
      << (options.task.kind == TaskKind::kRegress ? " values" : " logits")
      << (file.channels_from_forward ? "; the channels its forward takes" : "") << ")" << std::endl;
  const bool several = replicas > 1 || options.strategy == StrategyKind::kParameterServer;
  if (several && has_batch_norm(*file.module))
    out << "Note: the module's batch norms normalize by each replica's own slice of the batch "
           "(a scripted graph's batch norms cannot be made synchronized); their running "
           "statistics are averaged between the replicas, as every buffer is"
        << std::endl;
  if (options.sharding == Sharding::kParameters)
    out << "Note: --sharding parameters gathers the scripted module whole, as one layer (its "
           "graph cannot be split into layers): between steps each worker keeps a share of the "
           "parameters, but during a step it holds all of them; the optimizer's slots and the "
           "gradients stay split (--sharding gradients saves the same at less communication)"
        << std::endl;
}

torch::nn::Sequential make_job_model(const TrainOptions& options, const ModelFile* file,
                                     const models::ImageModelInput& input) {
  torch::manual_seed(options.seed);
  if (file == nullptr)
    return models::make_model(name_of(options.model), options.sync_batch_norm, input);
  torch::nn::Sequential model;
  model->push_back(std::dynamic_pointer_cast<models::TorchScriptModuleImpl>(file->module->clone()));
  return model;
}

keras::Model make_job_keras_model(const TrainOptions& options, const ModelFile* file,
                                  const models::ImageModelInput& input) {
  torch::manual_seed(options.seed);
  if (file == nullptr)
    return models::make_keras_model(name_of(options.model), options.sync_batch_norm, input);
  keras::KerasTensor images = keras::Input(file->example_shape);
  // The forward checked before (load_model_file) returns N x classes logits.
  models::TorchScriptLayer layer(file->module, file->example_shape);
  layer.named(kLayerName);
  const std::string stem = std::filesystem::path(options.model_file).stem().string();
  return keras::Model(images, layer(images), stem.empty() ? "torchscript_model" : stem);
}

const models::TorchScriptModuleImpl* scripted_module_of(const torch::nn::Module& model) {
  if (auto* script = dynamic_cast<const models::TorchScriptModuleImpl*>(&model)) return script;
  for (const auto& child : model.children())
    if (auto* script = dynamic_cast<const models::TorchScriptModuleImpl*>(child.get()))
      return script;
  return nullptr;
}

std::vector<std::pair<std::string, at::Tensor>> named_weights_of(const torch::nn::Module& model) {
  const torch::nn::Module* named = scripted_module_of(model);
  if (named == nullptr) named = &model;
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const auto& item : named->named_parameters()) weights.emplace_back(item.key(), item.value());
  for (const auto& item : named->named_buffers()) weights.emplace_back(item.key(), item.value());
  return weights;
}

void save_trained_model(const TrainOptions& options, const torch::nn::Module& model,
                        const std::map<std::string, std::string>& metadata) {
  const models::TorchScriptModuleImpl* script = scripted_module_of(model);
  if (!options.save_weights.empty()) {
    if (script != nullptr)
      models::save_torchscript_weights(*script, options.save_weights, options.env);
    else
      save_safetensors(options.save_weights, named_weights_of(model), metadata, options.env);
  }
  if (!options.save_torchscript.empty()) {
    DIST_INTERNAL_ASSERT(script != nullptr, "--save-torchscript without a scripted module");
    models::save_torchscript(*script, options.save_torchscript, options.env);
  }
}

}  // namespace dist::tools
