#include "dist/keras/elastic_callback.h"

#include <utility>

#include "dist/keras/model.h"

namespace dist::keras::callbacks {

Elastic::Elastic(ElasticContext& elastic, std::ostream& out,
                 std::shared_ptr<BackupAndRestore> backup)
    : elastic_(elastic), out_(out), backup_(std::move(backup)) {}

void Elastic::on_train_begin(const Logs&) {
  state_ = model().checkpoint();
  if (elastic_.track(state_, out_)) {
    model().resume_training_at(state_.state);
    return;
  }
  // No worker holds a commit (the first generation, or a loss before the first commit): fit
  // goes on from the directory's latest backup, if any.
  elastic_.set_resumed_at_step(backup_ ? backup_->resumed_at_step() : -1);
  if (elastic_.resumed_at_step() >= 0)
    out_ << "Resumed from " << backup_->backup_dir() << " at step " << elastic_.resumed_at_step()
         << std::endl;
}

void Elastic::on_train_batch_end(int64_t, const Logs&) {
  const int64_t step = model().global_step();
  if (elastic_.boundary_due(step)) {
    commit();
    if (elastic_.regroup_now(model().stop_training() || is_last_step(step)))
      model().set_stop_training(true);
  }
  elastic_.step_completed(step);
}

void Elastic::on_epoch_end(int, Logs&) { commit(); }

bool Elastic::is_last_step(int64_t step) const {
  const double steps_per_epoch = params().at("steps");
  return steps_per_epoch > 0 && step >= params().at("epochs") * steps_per_epoch;
}

void Elastic::commit() {
  state_ = model().checkpoint();            // afresh, as the optimizer's slots may have come since
  state_.state = model().training_state();  // a collective: every worker calls it
  state_.gather_worker_states();
  elastic_.commit();
}

}  // namespace dist::keras::callbacks
