// The standard callbacks of tf.keras.callbacks (see callback.h for when they are called).
//
//   FitOptions options;
//   options.callbacks = {
//       std::make_shared<callbacks::BackupAndRestore>("/tmp/backup"),
//       std::make_shared<callbacks::ModelCheckpoint>("ckpt/weights-{epoch:02d}.safetensors"),
//       std::make_shared<callbacks::EarlyStopping>("val_loss", /*patience=*/2),
//       std::make_shared<callbacks::TensorBoard>("logs")};
//
// Files are written by the chief only, atomically where a reader could see a partial file.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/keras/callback.h"

namespace dist {
class CheckpointManager;
class PreemptionWatcher;
class WritableFile;
class ProgressBar;
class SummaryWriter;
}  // namespace dist

namespace dist::keras {

// The progress bar fit adds by itself when verbose > 0 (only on the chief): "Epoch 1/10",
// then "938/938 [=====] - 8s 9ms/step - loss: 0.2076 - accuracy: 0.9364 - val_loss: ...".
class ProgbarLogger : public Callback {
 public:
  explicit ProgbarLogger(std::ostream& out);
  ~ProgbarLogger() override;

  void on_train_begin(const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  void on_epoch_begin(int epoch, const Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  void on_test_begin(const Logs& logs) override;
  void on_test_batch_end(int64_t batch, const Logs& logs) override;
  void on_test_end(const Logs& logs) override;

  // "loss: 0.2076 - accuracy: 0.9364 - val_loss: ...": loss first, then the other metrics,
  // then the validation ones; 4 decimals (scientific below 1e-3, as Keras prints).
  static std::string format(const Logs& logs);

 private:
  std::ostream& out_;
  std::unique_ptr<ProgressBar> bar_;
  bool in_fit_ = false;
  int verbose_ = 1;
  int64_t steps_done_ = 0;
};

// The best value so far of a monitored log entry. mode "min", "max", or "auto" (max for
// entries with "acc" in their name, min otherwise, as Keras decides).
class Monitor {
 public:
  Monitor(std::string key, const std::string& mode, double min_delta = 0);
  const std::string& key() const { return key_; }
  // The monitored value in logs; nullopt (and one warning on stderr) when it is missing.
  std::optional<double> value(const Logs& logs);
  // True when value improves on the best by more than min_delta.
  bool improves(double value) const;
  double best() const { return best_; }
  void set_best(double best) { best_ = best; }
  void reset();

 private:
  std::string key_;
  bool maximize_;
  double min_delta_;
  double best_;
  bool warned_ = false;
};

namespace callbacks {

// Saves the weights (safetensors) after every epoch, or only when `monitor` improved
// (save_best_only). `filepath` may contain "{epoch}" or "{epoch:02d}" (1-based, as Keras
// names files) and "{<log key>:.4f}" such as "{val_loss:.4f}".
class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(std::string filepath, std::string monitor = "val_loss",
                           bool save_best_only = false, const std::string& mode = "auto");
  void on_epoch_end(int epoch, Logs& logs) override;
  // The file for this epoch and these logs (exposed for tests).
  std::string path_for(int epoch, const Logs& logs) const;
  const std::vector<std::string>& saved() const { return saved_; }

 private:
  std::string filepath_;
  Monitor monitor_;
  bool save_best_only_;
  std::vector<std::string> saved_;
};

// Makes fit fault tolerant: it saves a checkpoint (weights, optimizer slots, random state,
// data position and the epoch's metric sums) at every epoch end, or every save_freq steps, and
// a fit that starts with a backup in backup_dir continues from it at the exact epoch and step.
// A SIGTERM or SIGINT makes every worker stop after the current step; the chief saves first
// (interrupted() is then true). It also saves when a callback placed before it stops fit
// within an epoch (a step limit). After a fit that ends at an epoch's end (all epochs done, or
// EarlyStopping), the backup is deleted when delete_checkpoint is true (as Keras does), so the
// next fit starts afresh; a fit stopped within an epoch keeps it for the resume.
class BackupAndRestore : public Callback {
 public:
  explicit BackupAndRestore(std::string backup_dir, int64_t save_freq = 0,
                            bool delete_checkpoint = true, int max_to_keep = 2);
  ~BackupAndRestore() override;

  void on_train_begin(const Logs& logs) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  void on_train_abort() override;

  bool interrupted() const { return interrupted_; }
  // The signal that interrupted the last fit on this worker (0 if none, or another worker's).
  int signal_number() const { return signal_number_; }
  // The global step the last fit resumed at, or -1 when it started afresh.
  int64_t resumed_at_step() const { return resumed_at_step_; }
  const std::string& last_saved() const { return last_saved_; }
  const std::string& backup_dir() const { return backup_dir_; }

 private:
  void save();

  std::string backup_dir_;
  int64_t save_freq_;  // 0: at epoch ends only
  bool delete_checkpoint_;
  int max_to_keep_;
  std::unique_ptr<CheckpointManager> manager_;
  std::unique_ptr<PreemptionWatcher> preemption_;
  bool interrupted_ = false;
  bool stopped_within_epoch_ = false;
  int signal_number_ = 0;
  int64_t resumed_at_step_ = -1;
  std::string last_saved_;
};

// Stops fit when `monitor` has not improved by more than min_delta for `patience` epochs.
// restore_best_weights: at the stop, set the weights back to the best epoch's.
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(std::string monitor = "val_loss", int patience = 0, double min_delta = 0,
                         const std::string& mode = "auto", bool restore_best_weights = false);
  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  // The epoch fit stopped after (0-based), or -1 when it did not stop early.
  int stopped_epoch() const { return stopped_epoch_; }
  int best_epoch() const { return best_epoch_; }

 private:
  Monitor monitor_;
  int patience_;
  bool restore_best_weights_;
  int wait_ = 0;
  int stopped_epoch_ = -1;
  int best_epoch_ = -1;
  std::vector<std::pair<std::string, at::Tensor>> best_weights_;
};

// Sets the learning rate at the start of every epoch to schedule(epoch, current rate), and
// adds "lr" to the epoch's logs.
class LearningRateScheduler : public Callback {
 public:
  using Schedule = std::function<double(int epoch, double learning_rate)>;
  explicit LearningRateScheduler(Schedule schedule);
  void on_epoch_begin(int epoch, const Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;

 private:
  Schedule schedule_;
};

// Appends one row per epoch to a CSV file: "epoch" then the log keys in sorted order (as
// Keras), written on the first epoch (and again if the keys change). append: keep earlier
// rows (for a resumed fit) instead of starting the file afresh. The file is written through
// Env::Default(), which refuses anything but a regular file (a device, a FIFO) at on_train_begin.
class CSVLogger : public Callback {
 public:
  explicit CSVLogger(std::string filename, char separator = ',', bool append = false);
  ~CSVLogger() override;
  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  void on_train_abort() override;

 private:
  std::string filename_;
  char separator_;
  bool append_;
  std::unique_ptr<WritableFile> file_;  // open between on_train_begin and on_train_end
  std::vector<std::string> keys_;
};

// TensorBoard event files: <log_dir>/train and <log_dir>/validation, scalars "epoch_<key>"
// per epoch at step = epoch (validation entries without their "val_" prefix, in the
// validation directory, as Keras writes them), and "batch_<key>" every update_freq steps at
// the global step when update_freq > 0. With histogram_freq > 0, every histogram_freq epochs
// (from the first) a histogram of each weight in the train directory at step = epoch, tagged
// "<layer>/<weight>" ("dense/weight", "batch_normalization/running_mean"; a weight with a NaN
// or infinity gets none, and a warning on stderr). Every worker must have it (at sharding
// 'parameters' the weights are gathered first, a collective); the chief writes.
class TensorBoard : public Callback {
 public:
  explicit TensorBoard(std::string log_dir = "logs", int64_t update_freq = 0,
                       int histogram_freq = 0);
  ~TensorBoard() override;
  void on_train_begin(const Logs& logs) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_train_end(const Logs& logs) override;

 private:
  void write_histograms(int epoch);

  std::string log_dir_;
  int64_t update_freq_;
  int histogram_freq_;
  std::unique_ptr<SummaryWriter> train_;
  std::unique_ptr<SummaryWriter> validation_;
};

}  // namespace callbacks
}  // namespace dist::keras
