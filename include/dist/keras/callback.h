// Callback: code that fit, evaluate and predict call at fixed points (tf.keras.callbacks).
//
// The order, for fit(epochs = 2) with validation data:
//
//   on_train_begin
//     on_epoch_begin(0)
//       on_train_batch_begin(0) on_train_batch_end(0) ... (each training step)
//       on_test_begin  on_test_batch_begin(0) on_test_batch_end(0) ...  on_test_end
//     on_epoch_end(0, logs)         logs: loss, <metrics>, val_loss, val_<metrics>
//     on_epoch_begin(1) ...
//   on_train_end                    (on_train_abort instead, when fit throws)
//
// evaluate() calls the on_test_* methods, predict() the on_predict_* methods.
//
// Logs. Epoch logs hold the epoch's results over all replicas and workers. Batch logs hold the
// running results of the epoch so far as this process sees them: under
// MultiWorkerMirroredStrategy, this worker's replicas only (reading the global value every step
// would add a collective to every step).
//
// Under MultiWorkerMirroredStrategy every worker runs every callback. Callbacks that write
// files write on the chief only (Model::is_chief()). A callback that sets
// Model::stop_training must set it on every worker at the same step, or the workers part ways;
// the built-in callbacks decide from epoch logs, which are the same everywhere.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace dist::keras {

class Model;

// Metric name -> value: "loss", "accuracy", "val_loss", "lr", ...
using Logs = std::map<std::string, double>;

class Callback {
 public:
  virtual ~Callback() = default;

  // Set by fit/evaluate/predict before the first call.
  void set_model(Model* model) { model_ = model; }
  Model& model() const;
  // Set by fit: "epochs", "steps" (per epoch; -1 when unknown) and "verbose".
  void set_params(const Logs& params) { params_ = params; }
  const Logs& params() const { return params_; }

  virtual void on_train_begin(const Logs& logs) { (void)logs; }
  virtual void on_train_end(const Logs& logs) { (void)logs; }
  // Instead of on_train_end when fit ends with an exception (not in Keras): release what
  // on_train_begin took (BackupAndRestore's signal handlers) and keep what a resume needs.
  virtual void on_train_abort() {}
  // Epoch numbers count from 0, as in Keras (the progress bar shows them from 1).
  virtual void on_epoch_begin(int epoch, const Logs& logs) { (void)epoch, (void)logs; }
  // May add entries to logs (LearningRateScheduler adds "lr"); later callbacks see them.
  virtual void on_epoch_end(int epoch, Logs& logs) { (void)epoch, (void)logs; }
  // batch: the step's index within the epoch.
  virtual void on_train_batch_begin(int64_t batch, const Logs& logs) { (void)batch, (void)logs; }
  virtual void on_train_batch_end(int64_t batch, const Logs& logs) { (void)batch, (void)logs; }
  virtual void on_test_begin(const Logs& logs) { (void)logs; }
  virtual void on_test_end(const Logs& logs) { (void)logs; }
  virtual void on_test_batch_begin(int64_t batch, const Logs& logs) { (void)batch, (void)logs; }
  virtual void on_test_batch_end(int64_t batch, const Logs& logs) { (void)batch, (void)logs; }
  virtual void on_predict_begin(const Logs& logs) { (void)logs; }
  virtual void on_predict_end(const Logs& logs) { (void)logs; }
  virtual void on_predict_batch_begin(int64_t batch, const Logs& logs) { (void)batch, (void)logs; }
  virtual void on_predict_batch_end(int64_t batch, const Logs& logs) { (void)batch, (void)logs; }

 private:
  Model* model_ = nullptr;
  Logs params_;
};

}  // namespace dist::keras
