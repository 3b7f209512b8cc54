#include <filesystem>

#include "dist/core/error.h"
#include "dist/keras/callbacks.h"
#include "dist/keras/model.h"
#include "dist/train/checkpoint.h"
#include "dist/train/preemption.h"

namespace dist::keras::callbacks {

BackupAndRestore::BackupAndRestore(std::string backup_dir, int64_t save_freq,
                                   bool delete_checkpoint, int max_to_keep)
    : backup_dir_(std::move(backup_dir)),
      save_freq_(save_freq),
      delete_checkpoint_(delete_checkpoint),
      max_to_keep_(max_to_keep) {
  DIST_CHECK_ARG(!backup_dir_.empty(), "BackupAndRestore: the backup directory is empty");
  DIST_CHECK_ARG(save_freq >= 0,
                 "BackupAndRestore: save_freq must be 0 (at epoch ends) or a "
                 "number of steps, got ",
                 save_freq);
  DIST_CHECK_ARG(max_to_keep >= 1, "BackupAndRestore: max_to_keep must be at least 1, got ",
                 max_to_keep);
}

BackupAndRestore::~BackupAndRestore() = default;

void BackupAndRestore::on_train_begin(const Logs&) {
  // Where steps run ahead of the loop (ParameterServerStrategy), fit takes a step's results
  // after later steps have started, so a save within an epoch would hold later steps' updates
  // than the step it records. Epoch ends and stops are saved once no step runs.
  DIST_CHECK_ARG(save_freq_ <= 0 || model().strategy().step_schedule().steps_ahead <= 1,
                 "BackupAndRestore: save_freq ", save_freq_,
                 " is not supported under ParameterServerStrategy (steps run ahead of the "
                 "chief, so a save within an epoch would not hold the step it records); use "
                 "save_freq 0 (epoch ends and stops), or a custom loop that waits for its "
                 "scheduled steps before writing (StepRunner's NextStep::kAfterRunningSteps)");
  preemption_.reset();  // first: only one watcher may exist at a time
  interrupted_ = stopped_within_epoch_ = false;
  signal_number_ = 0;
  resumed_at_step_ = -1;
  manager_ = std::make_unique<CheckpointManager>(backup_dir_, max_to_keep_);
  // Every worker reads the backup (the directory must be shared, as in TensorFlow).
  if (auto latest = manager_->latest()) {
    Checkpoint checkpoint = model().checkpoint();
    checkpoint.read(*latest);
    model().resume_training_at(checkpoint.state);
    resumed_at_step_ = checkpoint.state.step;
  }
  preemption_ = std::make_unique<PreemptionWatcher>();
}

void BackupAndRestore::save() {
  Checkpoint checkpoint = model().checkpoint();
  checkpoint.state = model().training_state();  // a collective: every worker calls it
  checkpoint.gather_worker_states();            // so is this
  if (model().is_chief() || checkpoint.written_in_pieces())
    last_saved_ = manager_->save(checkpoint);
}

void BackupAndRestore::on_train_batch_end(int64_t, const Logs&) {
  // Agreed by all workers, so they stop (and save) at the same step.
  interrupted_ = model().strategy().any_worker(preemption_->requested());
  const bool due = save_freq_ > 0 && model().global_step() % save_freq_ == 0;
  // A callback before this one asked fit to stop within the epoch (a step limit): keep the
  // step, so that a later fit continues from it.
  const bool stopping = model().stop_training();
  if (interrupted_ || stopping || due) save();
  stopped_within_epoch_ = interrupted_ || stopping;
  if (interrupted_) {
    signal_number_ = preemption_->signal_number();  // 0 on the workers not signalled
    model().set_stop_training(true);
  }
}

void BackupAndRestore::on_epoch_end(int, Logs&) {
  stopped_within_epoch_ = false;  // a stop at the epoch's last step: the epoch is complete
  save();
}

void BackupAndRestore::on_train_abort() { preemption_.reset(); }

void BackupAndRestore::on_train_end(const Logs&) {
  preemption_.reset();
  // A run that ended at an epoch's end (its last epoch, or EarlyStopping) is done; one stopped
  // within an epoch (a signal, a step limit) keeps its backup for the resume.
  if (!stopped_within_epoch_ && delete_checkpoint_) {
    if (model().is_chief()) std::filesystem::remove_all(backup_dir_);
    // No worker may look for a backup (in a next fit) before the chief has deleted it.
    model().strategy().any_worker(false);
  }
}

}  // namespace dist::keras::callbacks
