#include "task_options.h"

#include <set>
#include <sstream>

#include <CLI/CLI.hpp>

#include "dist/core/error.h"
#include "dist/train/metrics.h"

namespace dist::tools {

void add_task_flags(CLI::App& app, TaskFlagTexts& t) {
  app.add_option("--task", t.task,
                 "classify (an int64 class label; cross-entropy, accuracy) | regress (a float "
                 "label of one or more values; mean squared error, mean absolute error)")
      ->capture_default_str();
  app.add_option("--features", t.features,
                 "tfrecord: train on these features (comma list of float or int64 lists of a "
                 "fixed length, joined in this order) instead of an image; the label is "
                 "--label-feature");
}

void finish_task_options(TaskOptions& o, const TaskFlagTexts& t) {
  DIST_CHECK_ARG(t.task == "classify" || t.task == "regress", "unknown --task '", t.task,
                 "': use classify (a class label) or regress (numbers to predict)");
  o.kind = t.task == "regress" ? TaskKind::kRegress : TaskKind::kClassify;
  o.features.clear();
  if (t.features.empty()) return;
  std::set<std::string> seen;
  std::istringstream in(t.features);
  for (std::string name; std::getline(in, name, ',');) {
    DIST_CHECK_ARG(!name.empty() && seen.insert(name).second, "--features '", t.features,
                   "' names ", name.empty() ? "an empty feature" : "'" + name + "' twice",
                   ": give the feature names once each, separated by commas, e.g. "
                   "--features x or --features age,income");
    o.features.push_back(name);
  }
  DIST_CHECK_ARG(t.features.back() != ',', "--features '", t.features,
                 "' ends with a comma: give the feature names separated by commas");
}

std::string name_of(TaskKind kind) { return kind == TaskKind::kRegress ? "regress" : "classify"; }

std::string features_spelling(const TaskOptions& o) {
  std::string text;
  for (const std::string& name : o.features) text += (text.empty() ? "" : ",") + name;
  return text;
}

std::shared_ptr<Loss> task_loss(TaskKind kind) {
  if (kind == TaskKind::kRegress) return std::make_shared<MeanSquaredError>(Reduction::kNone);
  return std::make_shared<SparseCategoricalCrossentropy>(/*from_logits=*/true, Reduction::kNone);
}

std::string task_metric_name(TaskKind kind) {
  return kind == TaskKind::kRegress ? "mae" : "accuracy";
}

TaskMetric::TaskMetric(TaskKind kind, const std::string& name) : kind_(kind) {
  if (kind == TaskKind::kRegress)
    metric_ = std::make_unique<metrics::MeanAbsoluteError>(name);
  else
    metric_ = std::make_unique<metrics::SparseCategoricalAccuracy>(name);
}

void TaskMetric::update_state(const at::Tensor& y_true, const at::Tensor& y_pred) {
  if (kind_ == TaskKind::kRegress)
    static_cast<metrics::MeanAbsoluteError&>(*metric_).update_state(y_true, y_pred);
  else
    static_cast<metrics::SparseCategoricalAccuracy&>(*metric_).update_state(y_true, y_pred);
}

}  // namespace dist::tools
