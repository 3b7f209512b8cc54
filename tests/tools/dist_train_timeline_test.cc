// dist-train --timeline across two worker processes on 127.0.0.1 (dist-launch): each worker
// writes its own file, every step's phases account for its time, the collectives in the file
// add up to the library's counters (dist-train's JSON result), and scripts/merge_timelines.py
// joins the files. Real processes, bounded in time.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/timeline_reading.h"
#include "multi_worker/process_group.h"
#include "test_util.h"
#include "tools/train_runs.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::Trace;
using testing::TraceSpan;

constexpr int kTimelineSteps = 6;

// The collectives of `trace` summed as CommunicationCounters count them.
nlohmann::json sum_of_collectives(const Trace& trace) {
  int64_t count = 0, payload = 0, sent = 0;
  for (const auto& c : trace.collectives) {
    ++count;
    payload += c.args.at("bytes").get<int64_t>();
    sent += c.args.at("bytes_sent").get<int64_t>();
  }
  return {{"count", count}, {"payload_bytes", payload}, {"bytes_sent", sent}};
}

// Every step of worker `worker`'s trace: its phases, at least 95% of its time accounted for
// (the median step; every step at least 85%), and the collectives of its optimizer step (`kinds`)
// issued inside it with their peer.
void expect_worker_steps(const Trace& trace, int worker, const std::vector<std::string>& kinds) {
  EXPECT_EQ(trace.process_name, "worker:" + std::to_string(worker));
  EXPECT_EQ(trace.dropped, 0);
  const auto steps = trace.named("step");
  ASSERT_EQ(steps.size(), static_cast<size_t>(kTimelineSteps));
  std::vector<double> coverage;
  for (const TraceSpan& step : steps) {
    const std::string which =
        "worker " + std::to_string(worker) + ", step " + step.args.at("step").dump();
    for (const char* phase : {"data", "forward", "backward", "apply_gradients", "optimizer"})
      EXPECT_FALSE(trace.named_within(phase, step).empty()) << which << ": no " << phase;
    for (const auto& kind : kinds) {
      int inside = 0;
      for (const auto& c : trace.collectives) {
        if (c.name != kind || c.start_us < step.start_us || c.start_us > step.end_us()) continue;
        ++inside;
        EXPECT_EQ(c.args.at("peers"), 1) << which;
        EXPECT_GT(c.args.at("bytes").get<int64_t>(), 0) << which;
        EXPECT_FALSE(c.args.at("algorithm").get<std::string>().empty()) << which;
      }
      EXPECT_GT(inside, 0) << which << ": no " << kind << " issued inside the step";
    }
    const double covered = testing::covered_fraction(trace, step);
    std::printf("%s: %.0f us, %.1f%% covered by its phases\n", which.c_str(), step.duration_us,
                100 * covered);
    coverage.push_back(covered);
    // A step of 5 ms loses a few percent when a thread waits a scheduler slice for a core (2
    // processes of 4 threads on 2 cores); none may lose much.
    EXPECT_GE(covered, 0.85) << which << "; its spans:\n" << testing::describe_spans(trace, step);
  }
  std::sort(coverage.begin(), coverage.end());
  EXPECT_GE(coverage[coverage.size() / 2], 0.95) << "worker " << worker << ": the median step";
}

// Two workers train kTimelineSteps steps with a timeline (and `more`); checks both files and
// returns them.
std::vector<Trace> two_recorded_workers(const testing::TempDir& dir,
                                        const std::vector<std::string>& more,
                                        const std::vector<std::string>& kinds) {
  std::vector<std::string> args{"--max-steps",     std::to_string(kTimelineSteps),
                                "--test-examples", "256",
                                "--timeline",      dir.file("trace.json")};
  args.insert(args.end(), more.begin(), more.end());
  const auto result = testing::launch_job(testing::small_multi_worker_job(2, args));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  if (result.exit_code != 0) return {};
  const nlohmann::json report = testing::last_json(result.output, "[worker:0] ");
  EXPECT_FALSE(report.is_null()) << result.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("trace.json")))
      << "a task of a cluster writes the file named after its task";
  std::vector<Trace> traces;
  for (int worker = 0; worker < 2; ++worker) {
    traces.push_back(
        testing::read_trace(dir.file("trace.worker-" + std::to_string(worker) + ".json")));
    expect_worker_steps(traces.back(), worker, kinds);
  }
  // Every collective the chief's library counted is in its file, with the same bytes.
  if (!report.is_null()) {
    EXPECT_EQ(sum_of_collectives(traces[0]), report.at("collectives")) << result.output;
    EXPECT_GT(report.at("collectives").at("count").get<int64_t>(), kTimelineSteps);
  }
  return traces;
}

TEST(DistTrainTimelineTest, EachWorkersStepsAreAccountedForAndItsCollectivesAddUpToTheCounters) {
  testing::TempDir dir;
  two_recorded_workers(dir, {}, {"all_reduce"});

  // merge_timelines.py puts both workers in one file, one process row each.
  const std::string python = testing::find_program("python3");
  ASSERT_FALSE(python.empty()) << "python3 is not installed (scripts/install-deps.sh)";
  testing::WorkerProcesses merge;
  merge.start(
      python,
      {std::string(DIST_SOURCE_DIR) + "/scripts/merge_timelines.py", dir.file("merged.json"),
       dir.file("trace.worker-0.json"), dir.file("trace.worker-1.json")},
      {});
  const auto merged_run = merge.wait_all(60s).at(0);
  ASSERT_EQ(merged_run.exit_code, 0) << merged_run.output;
  const Trace merged = testing::read_trace(dir.file("merged.json"));
  std::set<int> pids;
  for (const auto& s : merged.spans) pids.insert(s.pid);
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(merged.named("step").size(), 2u * kTimelineSteps);
}

TEST(DistTrainTimelineTest, ShardedStepsShowTheirReduceScattersAndGathers) {
  testing::TempDir dir;
  two_recorded_workers(dir, {"--sharding", "optimizer"}, {"reduce_scatter", "all_gather"});
}

// As for the other outputs (issue 69 found --timeline out/x.json refused for a missing out/).
TEST(DistTrainTimelineTest, AMissingDirectoryIsCreated) {
  testing::TempDir dir;
  const auto result = testing::run_dist_train_alone(
      {"--strategy", "one_device", "--train-examples", "64", "--test-examples", "64", "--max-steps",
       "1", "--timeline", dir.file("missing/trace.json")});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(std::filesystem::is_regular_file(dir.file("missing/trace.json"))) << result.output;
}

}  // namespace
}  // namespace dist
