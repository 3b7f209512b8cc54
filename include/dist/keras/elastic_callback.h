// keras::callbacks::Elastic: a Keras fit as one generation of an elastic job
// (dist/train/elastic.h). At the start of fit it restores the newest state every worker of the
// generation committed (after BackupAndRestore, so a commit wins over the directory's backup);
// it commits at the job's step boundaries and at each epoch's end; where workers wait to join,
// it stops fit at the boundary, and the generation's training returns for the job to regroup.
//
//   job.run([&](dist::ElasticGeneration& generation) {
//     dist::Strategy strategy = generation.make_strategy({});
//     model.compile(strategy, ...);
//     auto elastic = std::make_shared<dist::keras::callbacks::Elastic>(generation, std::cout);
//     model.fit(data, {.epochs = 3, .callbacks = {elastic}});
//     return dist::GenerationEnd{model.global_step()};
//   });
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>

#include "dist/keras/callback.h"
#include "dist/keras/callbacks.h"
#include "dist/train/elastic.h"

namespace dist::keras::callbacks {

class Elastic : public Callback {
 public:
  // `out`: where restores and recoveries are said (the chief's output). `backup`: fit's
  // BackupAndRestore, if any (listed before this callback): when no worker holds a commit, the
  // job's resumed step is the backup's.
  Elastic(ElasticGeneration& generation, std::ostream& out,
          std::shared_ptr<BackupAndRestore> backup = nullptr);

  void on_train_begin(const Logs& logs) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  // The next epoch's start: a loss during its first steps then repeats no validation.
  void on_epoch_end(int epoch, Logs& logs) override;

  // Whether fit stopped where workers join (the generation regroups).
  bool regrouping() const { return generation_.regrouping(); }

 private:
  // The job's last step admits no joiner: fit would still end the epoch (its validation and
  // commit), and the next generation would then run no epoch to report.
  bool is_last_step(int64_t step) const;
  void commit();

  ElasticGeneration& generation_;
  std::ostream& out_;
  std::shared_ptr<BackupAndRestore> backup_;
};

}  // namespace dist::keras::callbacks
