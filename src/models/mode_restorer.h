// Puts a TorchScript module's training mode back when a check leaves, by return or by
// exception: the start-up checks run a forward in evaluation mode. Private.
#pragma once

#include "dist/models/torchscript_model.h"

namespace dist::models {

class ModeRestorer {
 public:
  explicit ModeRestorer(TorchScriptModuleImpl& model)
      : model_(model), training_(model.is_training()) {}
  ~ModeRestorer() { model_.train(training_); }
  ModeRestorer(const ModeRestorer&) = delete;
  ModeRestorer& operator=(const ModeRestorer&) = delete;

 private:
  TorchScriptModuleImpl& model_;
  bool training_;
};

}  // namespace dist::models
