// keras::callbacks::Elastic: a Keras fit as one generation of an elastic job
// (dist/train/elastic.h), over run_elastic's ElasticContext. At the start of fit it restores the
// newest state every worker of the generation committed (after BackupAndRestore, so a commit
// wins over the directory's backup); it commits at the job's step boundaries and at each epoch's
// end; where workers wait to join, it stops fit at the boundary, and the generation's training
// returns for the job to regroup.
//
//   dist::run_elastic(options, [&](dist::ElasticContext& elastic) {
//     keras::Model model = make_model();
//     model.compile(elastic.strategy(), ...);
//     auto callback = std::make_shared<dist::keras::callbacks::Elastic>(elastic, std::cout);
//     model.fit(data, {.epochs = 3, .callbacks = {callback}});
//     elastic.set_end({model.global_step()});
//   });
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>

#include "dist/keras/callback.h"
#include "dist/keras/callbacks.h"
#include "dist/train/checkpoint.h"
#include "dist/train/elastic.h"

namespace dist::keras::callbacks {

class Elastic : public Callback {
 public:
  // `elastic`: the generation's context (it outlives fit); the callback tracks the model's
  // checkpoint in it, so one fit per generation. `out`: where restores and recoveries are said
  // (the chief's output). `backup`: fit's BackupAndRestore, if any (listed before this
  // callback): when no worker holds a commit, the job's resumed step is the backup's.
  Elastic(ElasticContext& elastic, std::ostream& out,
          std::shared_ptr<BackupAndRestore> backup = nullptr);

  void on_train_begin(const Logs& logs) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  // The next epoch's start: a loss during its first steps then repeats no validation.
  void on_epoch_end(int epoch, Logs& logs) override;

  // Whether fit stopped where workers join (the generation regroups).
  bool regrouping() const { return elastic_.regrouping(); }

 private:
  // The job's last step admits no joiner: fit would still end the epoch (its validation and
  // commit), and the next generation would then run no epoch to report.
  bool is_last_step(int64_t step) const;
  // The model's training state into the tracked checkpoint (a collective), committed.
  void commit();

  ElasticContext& elastic_;
  std::ostream& out_;
  std::shared_ptr<BackupAndRestore> backup_;
  Checkpoint state_;  // the model's, tracked from on_train_begin
};

}  // namespace dist::keras::callbacks
