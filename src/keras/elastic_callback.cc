#include "dist/keras/elastic_callback.h"

#include <utility>

#include "dist/keras/model.h"

namespace dist::keras::callbacks {

Elastic::Elastic(ElasticGeneration& generation, std::ostream& out,
                 std::shared_ptr<BackupAndRestore> backup)
    : generation_(generation), out_(out), backup_(std::move(backup)) {}

void Elastic::on_train_begin(const Logs&) {
  Checkpoint checkpoint = model().checkpoint();
  if (generation_.restore(checkpoint, out_))
    model().resume_training_at(checkpoint.state);
  else  // no worker holds a commit (the first generation, or a loss before the first commit):
        // fit goes on from the directory's latest backup, if any
    generation_.set_resumed_at_step(backup_ ? backup_->resumed_at_step() : -1);
  if (!generation_.has_committed() && generation_.resumed_at_step() >= 0)
    out_ << "Resumed from " << backup_->backup_dir() << " at step " << generation_.resumed_at_step()
         << std::endl;
}

void Elastic::on_train_batch_end(int64_t, const Logs&) {
  const int64_t step = model().global_step();
  if (generation_.commit_due(step)) {
    commit();
    if (generation_.regroup_now(model().stop_training() || is_last_step(step)))
      model().set_stop_training(true);
  }
  generation_.report_recovery(out_, step);
}

void Elastic::on_epoch_end(int, Logs&) { commit(); }

bool Elastic::is_last_step(int64_t step) const {
  const double steps_per_epoch = params().at("steps");
  return steps_per_epoch > 0 && step >= params().at("epochs") * steps_per_epoch;
}

void Elastic::commit() {
  Checkpoint checkpoint = model().checkpoint();
  checkpoint.state = model().training_state();  // a collective: every worker calls it
  checkpoint.gather_worker_states();
  generation_.commit(checkpoint);
}

}  // namespace dist::keras::callbacks
