#include "timeline_file.h"

#include <filesystem>
#include <iostream>

#include "dist/core/error.h"
#include "dist/distribute/cluster_resolver.h"

namespace dist::tools {
namespace {

bool in_a_cluster(const TrainOptions& options) {
  return options.strategy == StrategyKind::kMultiWorker ||
         options.strategy == StrategyKind::kParameterServer;
}

int row_of(const ClusterConfig& config) {
  const TaskSpec& task = config.task;
  if (task.type == "chief") return 0;
  if (task.type == "worker") return task.index + ((config.cluster.num_tasks("chief") > 0 ? 1 : 0));
  if (task.type == "ps") return 1000 + task.index;
  return 2000 + task.index;
}

}  // namespace

TimelineOptions timeline_options(const TrainOptions& options) {
  TimelineOptions timeline;
  timeline.path = options.timeline;
  if (!in_a_cluster(options)) {
    timeline.process_name = "dist-train";
    return timeline;
  }
  const ClusterConfig config = resolve_cluster().config;
  const std::filesystem::path given(options.timeline);
  const std::string task = config.task.type + "-" + std::to_string(config.task.index);
  timeline.path =
      (given.parent_path() / (given.stem().string() + "." + task + given.extension().string()))
          .string();
  timeline.process_name = config.task.name();
  timeline.process_id = row_of(config);
  return timeline;
}

TimelineRecording::TimelineRecording(const TrainOptions& options) {
  if (options.timeline.empty()) return;
  start_timeline(timeline_options(options));
  recording_ = true;
}

TimelineRecording::~TimelineRecording() {
  if (!recording_) return;
  try {
    stop_timeline();
  } catch (const std::exception& e) {
    std::cerr << "dist-train: the timeline could not be written: " << e.what() << std::endl;
  }
}

}  // namespace dist::tools
