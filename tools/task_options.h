// dist-train's task: what the model learns (--task classify|regress) and from what (the image,
// or TFRecord features named by --features), with the loss and metric each task trains and
// reports by.
//
//   classify: the label is an int64 class; sparse categorical cross-entropy on the logits,
//             accuracy reported.
//   regress:  the label is a float (or int64) list of T values, the model's T outputs; mean
//             squared error, the mean absolute error ("mae") reported.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/train/loss.h"
#include "dist/train/metric.h"

namespace CLI {
class App;
}

namespace dist::tools {

enum class TaskKind { kClassify, kRegress };

struct TaskOptions {
  TaskKind kind = TaskKind::kClassify;
  // The TFRecord features (float or int64 lists of a fixed length) the model takes instead of
  // an image, in the order given; empty: the image.
  std::vector<std::string> features;

  bool uses_features() const { return !features.empty(); }
};

// The flags' texts as given, turned into TaskOptions by finish_task_options.
struct TaskFlagTexts {
  std::string task = "classify";
  std::string features;
};

void add_task_flags(CLI::App& app, TaskFlagTexts& texts);
// InvalidArgument naming the flag for a value that is not one.
void finish_task_options(TaskOptions& options, const TaskFlagTexts& texts);

// "classify" / "regress"; "x,y" as --features spells them.
std::string name_of(TaskKind kind);
std::string features_spelling(const TaskOptions& options);

// The task's per-example loss (Reduction::kNone, from logits for classify).
std::shared_ptr<Loss> task_loss(TaskKind kind);
// What the task reports beside the loss, as Keras names it in compile and logs: "accuracy" or
// "mae".
std::string task_metric_name(TaskKind kind);

// The task's metric (named `name`) behind one interface: accuracy of the logits' argmax, or
// the mean absolute error.
class TaskMetric {
 public:
  TaskMetric(TaskKind kind, const std::string& name);
  void update_state(const at::Tensor& y_true, const at::Tensor& y_pred);
  Metric& metric() { return *metric_; }
  const Metric& metric() const { return *metric_; }

 private:
  TaskKind kind_;
  std::unique_ptr<Metric> metric_;
};

}  // namespace dist::tools
