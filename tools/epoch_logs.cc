#include "epoch_logs.h"

#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

namespace dist::tools {

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value;
  return out.str();
}

EpochLogs::EpochLogs(const TrainOptions& options, bool chief, std::ostream& out)
    : out_(out), unit_(options.task.uses_features() ? "examples/s" : "images/s") {
  if (!chief || options.log_dir.empty()) return;
  Env::Default()->create_dirs(options.log_dir);
  metrics_log_ = Env::Default()->new_appendable_file(options.log_dir + "/metrics.jsonl");
  train_summary_.emplace(options.log_dir + "/train", options.env);
  validation_summary_.emplace(options.log_dir + "/validation", options.env);
}

void EpochLogs::report(int epoch, const TrainResult& r, double epoch_seconds, double per_second) {
  const std::string& metric = r.metric_name;
  out_ << "Epoch " << epoch + 1 << ": loss " << fixed(r.train_loss, 4) << " - " << metric << " "
       << fixed(r.train_metric, 4) << " - test loss " << fixed(r.test_loss, 4) << " - test "
       << metric << " " << fixed(r.test_metric, 4) << " - " << fixed(epoch_seconds, 1) << "s - "
       << fixed(per_second, 0) << " " << unit_ << std::endl;
  if (metrics_log_) {
    const std::string line =
        nlohmann::json{{"epoch", epoch + 1},          {"step", r.steps},
                       {"train_loss", r.train_loss},  {"train_" + metric, r.train_metric},
                       {"test_loss", r.test_loss},    {"test_" + metric, r.test_metric},
                       {"images_per_sec", per_second}}
            .dump() +
        "\n";
    metrics_log_->append(line.data(), line.size());
  }
  if (train_summary_) {
    train_summary_->scalar("epoch_loss", r.train_loss, epoch);
    train_summary_->scalar("epoch_" + metric, r.train_metric, epoch);
    validation_summary_->scalar("epoch_loss", r.test_loss, epoch);
    validation_summary_->scalar("epoch_" + metric, r.test_metric, epoch);
  }
}

void EpochLogs::flush() {
  if (!train_summary_) return;
  train_summary_->flush();
  validation_summary_->flush();
}

}  // namespace dist::tools
