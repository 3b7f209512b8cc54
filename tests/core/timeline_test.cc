// The timeline (dist/core/timeline.h): what it writes, what it refuses, and the phases of the
// steps of one device and of two mirrored replicas, read back as JSON. The phases across worker
// processes, checked against the library's counters, are DistTrainTimelineTest's.
#include "dist/core/timeline.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "core/timeline_reading.h"
#include "core/timeline_recorder.h"
#include "dist/core/error.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/train/loss.h"
#include "test_util.h"

namespace dist {
namespace {

using testing::Trace;
using testing::TraceSpan;

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(TimelineTest, NothingIsRecordedOrWrittenWhenOff) {
  testing::TempDir dir;
  EXPECT_FALSE(timeline_recording());
  { TimelineSpan span("unseen"); }
  EXPECT_EQ(stop_timeline(), 0);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(TimelineTest, SpansOfEveryThreadAreWrittenAsChromeTraceEvents) {
  testing::TempDir dir;
  const double before = now_us();
  start_timeline({dir.file("trace.json"), "worker:3", 3});
  EXPECT_TRUE(timeline_recording());
  detail::name_timeline_thread("test thread");
  {
    TimelineSpan span("outer", "mine");
    span.arg("answer", 42);
    span.arg("bytes", int64_t{1} << 40);
    span.arg("ignored", 1);  // a third argument is dropped
    std::thread([] {
      detail::name_timeline_thread("helper");
      TimelineSpan inner("inner");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }).join();
  }
  EXPECT_EQ(stop_timeline(), 2);
  EXPECT_FALSE(timeline_recording());
  const double after = now_us();

  const Trace trace = testing::read_trace(dir.file("trace.json"));
  EXPECT_EQ(trace.process_name, "worker:3");
  EXPECT_EQ(trace.dropped, 0);
  ASSERT_EQ(trace.spans.size(), 2u);
  const TraceSpan outer = trace.named("outer").at(0);
  const TraceSpan inner = trace.named("inner").at(0);
  EXPECT_EQ(outer.pid, 3);
  EXPECT_EQ(outer.category, "mine");
  EXPECT_EQ(inner.category, "user");
  EXPECT_EQ(outer.args, (nlohmann::json{{"answer", 42}, {"bytes", int64_t{1} << 40}}));
  EXPECT_EQ(trace.thread_names.at(outer.tid), "test thread");
  EXPECT_EQ(trace.thread_names.at(inner.tid), "helper");
  EXPECT_EQ(trace.thread_names.at(0), "collectives");
  EXPECT_TRUE(inner.within(outer));
  EXPECT_GE(inner.duration_us, 2000);
  // On the system clock, so that the files of several workers line up.
  EXPECT_GE(outer.start_us, before - 1000);
  EXPECT_LE(outer.end_us(), after + 1000);
}

// start_timeline(options) throws an InvalidArgument that says `what`.
void expect_refused(const TimelineOptions& options, const std::string& what) {
  const std::string message =
      testing::message_of<InvalidArgument>([&] { start_timeline(options); });
  EXPECT_NE(message.find(what), std::string::npos) << message;
}

TEST(TimelineTest, BadOptionsAreRefusedNamingWhatToDo) {
  testing::TempDir dir;
  expect_refused({"", "p", 0}, "the path of the timeline file is empty");
  expect_refused({dir.path(), "p", 0}, "is not a regular file but a directory");
  EXPECT_FALSE(timeline_recording());
  start_timeline({dir.file("first.json"), "p", 0});
  expect_refused({dir.file("second.json"), "p", 0}, "already being recorded into");
  stop_timeline();
  EXPECT_TRUE(std::filesystem::exists(dir.file("first.json")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("second.json")));
}

// Like every other output: a missing directory is created at the start, and a path that holds
// what a new file must not replace (a FIFO here) is refused then, not when the recording ends.
TEST(TimelineTest, AMissingDirectoryIsCreatedAndAFifoRefusedAtTheStart) {
  testing::TempDir dir;
  start_timeline({dir.file("missing/deeper/trace.json"), "p", 0});
  EXPECT_TRUE(std::filesystem::is_directory(dir.file("missing/deeper")));
  stop_timeline();
  EXPECT_TRUE(std::filesystem::is_regular_file(dir.file("missing/deeper/trace.json")));
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  expect_refused({dir.file("fifo"), "p", 0}, "is not a regular file but a FIFO");
  EXPECT_TRUE(std::filesystem::is_fifo(dir.file("fifo")));
}

TEST(TimelineTest, TheFileSaysHowManySpansItDropped) {
  testing::TempDir dir;
  TimelineOptions options{dir.file("trace.json"), "p", 0};
  options.max_events = 5;
  start_timeline(options);
  for (int i = 0; i < 12; ++i) TimelineSpan span("one");
  EXPECT_EQ(stop_timeline(), 5);
  const Trace trace = testing::read_trace(dir.file("trace.json"));
  EXPECT_EQ(trace.spans.size(), 5u);
  EXPECT_EQ(trace.dropped, 7);
}

// Trains `steps` SGD steps of the tutorial CNN on random images through a StepRunner, as
// keras fit and dist-train do, recording a timeline into `path`.
void train_recorded(const Strategy& strategy, const std::string& path, int steps) {
  torch::manual_seed(3);
  auto model = strategy.mirror(models::make_tutorial_cnn());
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.01));
  SparseCategoricalCrossentropy loss_fn(true, Reduction::kNone);
  auto images = torch::rand({64 * steps, 1, 28, 28});
  auto labels = torch::randint(0, 10, {64 * steps});
  auto data = data::Dataset::from_tensor_slices({images, labels}).batch(64);
  auto runner = strategy.make_step_runner(
      TrainStep("timeline_test/train", data, [&](const PerReplica<data::Element>& batch) {
        strategy.run(
            [&](const data::Element& b) {
              compute_average_loss(loss_fn(b[1], model->forward(b[0]))).backward();
              optimizer->apply_gradients();
            },
            batch);
      }));
  start_timeline({path, "test", 0});
  auto epoch = runner->epoch(0, -1);
  while (epoch->next([](int64_t, int64_t) { return NextStep::kStart; })) {
  }
  stop_timeline();
}

// Every step holds `replicas` forward, backward and apply_gradients spans in that order on
// each replica's row, an optimizer step inside an apply_gradients, one "data" span, and the
// phases account for at least 95% of it.
void expect_phases(const Trace& trace, int steps, int replicas) {
  const auto step_spans = trace.named("step");
  ASSERT_EQ(step_spans.size(), static_cast<size_t>(steps));
  for (const TraceSpan& step : step_spans) {
    const std::string which = "step " + step.args.value("step", nlohmann::json()).dump();
    EXPECT_EQ(trace.thread_names.at(step.tid), "loop") << which;
    EXPECT_EQ(trace.named_within("data", step).size(), 1u) << which;
    const auto forwards = trace.named_within("forward", step);
    const auto backwards = trace.named_within("backward", step);
    const auto applies = trace.named_within("apply_gradients", step);
    ASSERT_EQ(forwards.size(), static_cast<size_t>(replicas)) << which;
    ASSERT_EQ(backwards.size(), static_cast<size_t>(replicas)) << which;
    ASSERT_EQ(applies.size(), static_cast<size_t>(replicas)) << which;
    for (int r = 0; r < replicas; ++r) {
      const TraceSpan& forward = forwards[static_cast<size_t>(r)];
      const auto same_row = [&](const TraceSpan& s) { return s.tid == forward.tid; };
      const auto backward = std::find_if(backwards.begin(), backwards.end(), same_row);
      const auto apply = std::find_if(applies.begin(), applies.end(), same_row);
      ASSERT_NE(backward, backwards.end()) << which;
      ASSERT_NE(apply, applies.end()) << which;
      // Timestamps are doubles of about 1.8e15 us: a quarter of a microsecond apart at most.
      EXPECT_GT(backward->duration_us, 100) << which;  // autograd's backward functions ran
      EXPECT_LE(forward.end_us(), backward->start_us + 1) << which;
      EXPECT_LE(backward->end_us(), apply->start_us + 1) << which;
      EXPECT_EQ(trace.thread_names.at(forward.tid).rfind(replicas > 1 ? "replica " : "loop", 0), 0u)
          << which;
    }
    EXPECT_GE(trace.named_within("optimizer", step).size(), 1u) << which;
    const double covered = testing::covered_fraction(trace, step);
    std::printf("%s: %.1f us, %.1f%% covered by its phases\n", which.c_str(), step.duration_us,
                100 * covered);
    EXPECT_GE(covered, 0.95) << which << "; its spans:\n" << testing::describe_spans(trace, step);
  }
}

TEST(TimelineTest, OneDeviceStepsShowDataForwardBackwardAndTheOptimizer) {
  testing::TempDir dir;
  train_recorded(OneDeviceStrategy("cpu:0"), dir.file("trace.json"), 4);
  expect_phases(testing::read_trace(dir.file("trace.json")), 4, 1);
}

TEST(TimelineTest, MirroredReplicasEachHaveARowWithTheirPhases) {
  testing::TempDir dir;
  MirroredOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.threads_per_replica = 1;
  train_recorded(MirroredStrategy(options), dir.file("trace.json"), 4);
  const Trace trace = testing::read_trace(dir.file("trace.json"));
  expect_phases(trace, 4, 2);
  // One process: nothing crosses to other workers.
  EXPECT_TRUE(trace.collectives.empty());
}

}  // namespace
}  // namespace dist
