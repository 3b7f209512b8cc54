// A TorchScript module (torch.jit.script or torch.jit.trace in Python, saved with
// torch.jit.save) as a LibTorch module, so that every strategy trains it like any other model,
// and the trained module goes back to Python. Its parameters and buffers ARE the scripted
// module's tensors, named by Python's state_dict keys; what a scripted graph cannot do
// (sharding 'parameters' layer by layer) is refused by name.
//
//   auto model = strategy.mirror(dist::models::load_torchscript("cnn.pt"));
//   dist::models::check_classifier_forward(*model.primary(), first_batch, 10);
//   ... strategy.run(step, batch) as for any model ...
//   dist::models::save_torchscript(*model.primary(), "trained.pt");   // torch.jit.load reads it
//
// Names, storage, buffers, clone, modes and limits: docs/guide.md, "What the strategies do with
// it"; why an adapter: docs/design.md, "Models from Python".
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dist/core/env.h"

namespace dist::models {

class TorchScriptModuleImpl : public torch::nn::Module {
 public:
  // Wraps `script` without copying it: this module and `script` share every tensor. `file`
  // names the module in messages (the file it was loaded from; "" for none).
  explicit TorchScriptModuleImpl(torch::jit::Module script, std::string file = "");

  // The scripted forward on one tensor. InvalidArgument, naming the file, if forward returns
  // anything but one tensor; exceptions raised inside the scripted code pass through.
  at::Tensor forward(at::Tensor input);

  // A deep copy: the copy's parameters, buffers and tensor attributes are its own, with the
  // same values and requires_grad flags, and its mode is this module's. `device` moves it.
  std::shared_ptr<torch::nn::Module> clone(
      const c10::optional<torch::Device>& device = c10::nullopt) const override;

  // Sets training (true) or evaluation mode here and in the scripted module.
  void train(bool on = true) override;

  // The scripted module, sharing its tensors with this one (save or inspect it; calling
  // methods other than forward is fine).
  const torch::jit::Module& script() const { return script_; }
  // The file the module was loaded from ("" for one built from a torch::jit::Module).
  const std::string& file() const { return file_; }

 private:
  torch::jit::Module script_;
  std::string file_;
};
TORCH_MODULE(TorchScriptModule);

// Loads a TorchScript file (torch.jit.save's zip) onto the CPU, through `env` (not owned). Its
// parameters keep the requires_grad flags they were saved with, and the mode it was saved in.
// Throws DataError, naming the file and what to do, when it is missing or not a regular file,
// is not a TorchScript file (text, safetensors, a torch.save() state dict or pickled module), is
// truncated or damaged, was written by a newer PyTorch than this LibTorch (1.13) reads, or
// calls operators this LibTorch does not have; throws InvalidArgument, naming the file, when the
// module has no forward method, no parameter that requires a gradient, a parameter of an
// integer dtype (no optimizer can step it: it should be a buffer), or one tensor under two
// parameter names (tied weights: the strategies would count its gradient twice).
// Damaged includes what LibTorch itself does not check, verified before it reads the archive
// (src/models/torchscript_archive.h): a record whose CRC-32 or sizes are wrong, a tensor whose
// record is shorter than the tensor, deflated records declaring more than the file's size plus
// 64 MiB (a zip bomb, refused before anything is allocated); the message names the record and
// the sizes.
TorchScriptModule load_torchscript(const std::string& path, Env* env = Env::Default());

// Runs one forward of `model` on `batch` (a float N x C x H x W image batch, as training will
// give it) and checks that it returns float N x classes logits (any number of classes when
// `classes` is -1); returns them. Runs in evaluation mode without gradients (BatchNorm's
// statistics do not move), and puts the mode back. Throws InvalidArgument naming the file,
// what was expected and what came back: not a tensor (a tuple, a list, ...), not a floating
// tensor, a rank other than 2, a first dimension other than N, a class count other than
// `classes`, or the exception the scripted code raised on this batch.
at::Tensor check_classifier_forward(TorchScriptModuleImpl& model, const at::Tensor& batch,
                                    int64_t classes = -1);

// Writes `model` as a TorchScript file with its current parameters, buffers and mode, which
// Python's torch.jit.load (and load_torchscript) reads. Atomic, through `env` (not owned): a
// crash leaves the old file or the complete new one. DataError naming `path` on failure.
void save_torchscript(const TorchScriptModuleImpl& model, const std::string& path,
                      Env* env = Env::Default());

// Writes `model`'s parameters and buffers as safetensors under the names of Python's
// model.state_dict(), so that `model.load_state_dict(safetensors.torch.load_file(path))` reads
// them into the Python module the file came from. Errors as save_safetensors
// (dist/train/safetensors.h).
void save_torchscript_weights(const TorchScriptModuleImpl& model, const std::string& path,
                              Env* env = Env::Default());

}  // namespace dist::models
