// Callbacks: the order they fire in, and what each standard callback does.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>

#include <torch/torch.h>

#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/keras/callbacks.h"
#include "dist/keras/model.h"
#include "equivalence_data.h"
#include "keras_test_models.h"
#include "test_util.h"
#include "tfrecord_reader.h"

namespace dist::keras {
namespace {

// Writes down every call as "name(argument)".
class Recorder : public Callback {
 public:
  std::vector<std::string> calls;
  void on_train_begin(const Logs&) override { calls.push_back("train_begin"); }
  void on_train_end(const Logs&) override { calls.push_back("train_end"); }
  void on_epoch_begin(int e, const Logs&) override { add("epoch_begin", e); }
  void on_epoch_end(int e, Logs&) override { add("epoch_end", e); }
  void on_train_batch_begin(int64_t b, const Logs&) override { add("train_batch_begin", b); }
  void on_train_batch_end(int64_t b, const Logs&) override { add("train_batch_end", b); }
  void on_test_begin(const Logs&) override { calls.push_back("test_begin"); }
  void on_test_end(const Logs&) override { calls.push_back("test_end"); }
  void on_test_batch_begin(int64_t b, const Logs&) override { add("test_batch_begin", b); }
  void on_test_batch_end(int64_t b, const Logs&) override { add("test_batch_end", b); }
  void on_predict_begin(const Logs&) override { calls.push_back("predict_begin"); }
  void on_predict_end(const Logs&) override { calls.push_back("predict_end"); }
  void on_predict_batch_begin(int64_t b, const Logs&) override { add("predict_batch_begin", b); }
  void on_predict_batch_end(int64_t b, const Logs&) override { add("predict_batch_end", b); }

 private:
  void add(const std::string& name, int64_t n) {
    calls.push_back(name + "(" + std::to_string(n) + ")");
  }
};

Model compiled_cnn(const Strategy& strategy, const Optimizer& optimizer = optimizers::Adam(1e-3)) {
  torch::manual_seed(7);
  Model model = testing::keras_tutorial_cnn();
  model.compile(strategy, optimizer, SparseCategoricalCrossentropy(true), {"accuracy"});
  return model;
}

using testing::quiet;

TEST(KerasCallbacksTest, FireInTheDocumentedOrder) {
  Model model = compiled_cnn(MirroredStrategy({"cpu:0", "cpu:1"}));
  auto recorder = std::make_shared<Recorder>();
  FitOptions options = quiet(2);
  options.steps_per_epoch = 2;
  options.validation_data = testing::equivalence_data();
  options.validation_steps = 1;
  options.callbacks = {recorder};
  model.fit(testing::equivalence_data(), options);
  const std::vector<std::string> epoch_calls = {
      "train_batch_begin(0)", "train_batch_end(0)",  "train_batch_begin(1)", "train_batch_end(1)",
      "test_begin",           "test_batch_begin(0)", "test_batch_end(0)",    "test_end"};
  std::vector<std::string> expected = {"train_begin", "epoch_begin(0)"};
  expected.insert(expected.end(), epoch_calls.begin(), epoch_calls.end());
  expected.insert(expected.end(), {"epoch_end(0)", "epoch_begin(1)"});
  expected.insert(expected.end(), epoch_calls.begin(), epoch_calls.end());
  expected.insert(expected.end(), {"epoch_end(1)", "train_end"});
  EXPECT_EQ(recorder->calls, expected);

  recorder->calls.clear();
  EvaluateOptions evaluate;
  evaluate.steps = 1;
  evaluate.verbose = 0;
  evaluate.callbacks = {recorder};
  model.evaluate(testing::equivalence_data(), evaluate);
  model.predict(testing::equivalence_data(), evaluate);
  EXPECT_EQ(recorder->calls,
            (std::vector<std::string>{"test_begin", "test_batch_begin(0)", "test_batch_end(0)",
                                      "test_end", "predict_begin", "predict_batch_begin(0)",
                                      "predict_batch_end(0)", "predict_end"}));
}

TEST(KerasCallbacksTest, EarlyStoppingStopsWhenTheMonitoredValueStopsImproving) {
  // A learning rate of 0 leaves the weights alone: val_loss is the same every epoch, so it
  // improves once (on the initial infinity) and then waits `patience` epochs.
  Model model = compiled_cnn(OneDeviceStrategy("cpu:0"), optimizers::SGD(0.0));
  auto early = std::make_shared<callbacks::EarlyStopping>("val_loss", /*patience=*/2);
  FitOptions options = quiet(10);
  options.steps_per_epoch = 1;
  options.validation_data = testing::equivalence_data();
  options.validation_steps = 2;
  options.callbacks = {early};
  History history = model.fit(testing::equivalence_data(), options);
  EXPECT_EQ(history.epoch, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(early->stopped_epoch(), 2);
  EXPECT_EQ(early->best_epoch(), 0);
}

TEST(KerasCallbacksTest, EarlyStoppingRestoresTheBestWeights) {
  // SGD with a huge learning rate diverges after the first epoch: the loss gets worse, and
  // the restored weights are the ones after epoch 0.
  Model model = compiled_cnn(MirroredStrategy({"cpu:0", "cpu:1"}), optimizers::SGD(0.05));
  auto early = std::make_shared<callbacks::EarlyStopping>("loss", 1, 0.0, "min", true);
  auto scheduler = std::make_shared<callbacks::LearningRateScheduler>(
      [](int epoch, double) { return epoch == 0 ? 0.05 : 50.0; });
  std::vector<torch::Tensor> after_first;
  struct Snapshot : Callback {
    std::vector<torch::Tensor>* out;
    explicit Snapshot(std::vector<torch::Tensor>* o) : out(o) {}
    void on_epoch_end(int epoch, Logs&) override {
      if (epoch != 0) return;
      for (const auto& [name, t] : model().weights()) out->push_back(t.detach().clone());
    }
  };
  FitOptions options = quiet(6);
  options.callbacks = {scheduler, std::make_shared<Snapshot>(&after_first), early};
  History history = model.fit(testing::equivalence_data(), options);
  ASSERT_GE(history.epoch.size(), 2u);
  ASSERT_LT(history.epoch.size(), 6u) << "did not stop";
  EXPECT_EQ(early->best_epoch(), 0);
  auto now = model.weights();
  for (size_t i = 0; i < now.size(); ++i) EXPECT_TRUE(torch::equal(now[i].second, after_first[i]));
}

TEST(KerasCallbacksTest, LearningRateSchedulerSetsEachEpochsRate) {
  Model model = compiled_cnn(MirroredStrategy({"cpu:0", "cpu:1"}), optimizers::SGD(0.1));
  FitOptions options = quiet(3);
  options.steps_per_epoch = 1;
  options.callbacks = {std::make_shared<callbacks::LearningRateScheduler>(
      [](int epoch, double lr) { return epoch == 0 ? lr : lr / 2; })};
  History history = model.fit(testing::equivalence_data(), options);
  EXPECT_EQ(history.history["lr"], (std::vector<double>{0.1, 0.05, 0.025}));
  EXPECT_DOUBLE_EQ(model.learning_rate(), 0.025);
}

TEST(KerasCallbacksTest, CsvLoggerWritesAHeaderAndOneRowPerEpoch) {
  testing::TempDir dir;
  Model model = compiled_cnn(MirroredStrategy({"cpu:0", "cpu:1"}));
  FitOptions options = quiet(2);
  options.steps_per_epoch = 2;
  options.callbacks = {std::make_shared<callbacks::CSVLogger>(dir.file("log/training.csv"))};
  History history = model.fit(testing::equivalence_data(), options);
  std::istringstream csv(testing::read_file(dir.file("log/training.csv")));
  std::string header, row0, row1, extra;
  std::getline(csv, header);
  std::getline(csv, row0);
  std::getline(csv, row1);
  EXPECT_EQ(header, "epoch,accuracy,loss");
  EXPECT_FALSE(std::getline(csv, extra));
  EXPECT_EQ(row1.substr(0, 2), "1,");
  char expected[64];
  std::snprintf(expected, sizeof expected, "0,%.10g,%.10g", history.history["accuracy"][0],
                history.history["loss"][0]);
  EXPECT_EQ(row0, expected);
}

TEST(KerasCallbacksTest, ModelCheckpointSavesLoadableWeightsNamedByEpochAndLogs) {
  testing::TempDir dir;
  Model model = compiled_cnn(MirroredStrategy({"cpu:0", "cpu:1"}));
  auto checkpoint = std::make_shared<callbacks::ModelCheckpoint>(
      dir.file("ckpt/weights-{epoch:02d}-{loss:.3f}.safetensors"), "loss", false);
  FitOptions options = quiet(2);
  options.steps_per_epoch = 3;
  options.callbacks = {checkpoint};
  History history = model.fit(testing::equivalence_data(), options);
  ASSERT_EQ(checkpoint->saved().size(), 2u);
  char name[64];
  std::snprintf(name, sizeof name, "weights-02-%.3f.safetensors", history.history["loss"][1]);
  EXPECT_EQ(std::filesystem::path(checkpoint->saved()[1]).filename().string(), name);
  Model restored = compiled_cnn(OneDeviceStrategy("cpu:0"));
  restored.load_weights(checkpoint->saved()[1]);
  auto a = model.weights(), b = restored.weights();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].second, b[i].second));
  // save_best_only: a value that does not improve saves nothing.
  auto best =
      std::make_shared<callbacks::ModelCheckpoint>(dir.file("best.safetensors"), "lr", true, "max");
  options.callbacks = {
      std::make_shared<callbacks::LearningRateScheduler>([](int, double lr) { return lr; }), best};
  model.fit(testing::equivalence_data(), options);
  EXPECT_EQ(best->saved().size(), 1u);  // the first epoch improves on -inf; the second does not
}

TEST(KerasCallbacksTest, TensorBoardEventsHoldTheLoggedValues) {
  testing::TempDir dir;
  Model model = compiled_cnn(MirroredStrategy({"cpu:0", "cpu:1"}));
  FitOptions options = quiet(2);
  options.steps_per_epoch = 3;
  options.validation_data = testing::equivalence_data();
  options.validation_steps = 2;
  options.callbacks = {std::make_shared<callbacks::TensorBoard>(dir.file("tb"), 2)};
  History history = model.fit(testing::equivalence_data(), options);

  auto events_in = [&](const std::string& sub) {
    std::vector<std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir.file("tb/" + sub)))
      files.push_back(entry.path().string());
    EXPECT_EQ(files.size(), 1u) << sub;
    std::string error;
    auto events = testing::read_scalar_events(files.at(0), dir.path(), &error);
    EXPECT_EQ(error, "") << sub;
    return events;
  };
  auto find = [](const std::vector<testing::ScalarEvent>& events, const std::string& tag,
                 int64_t step) -> std::optional<float> {
    for (const auto& e : events)
      if (e.tag == tag && e.step == step) return e.value;
    return std::nullopt;
  };
  auto train = events_in("train"), validation = events_in("validation");
  for (int epoch : {0, 1}) {
    EXPECT_EQ(find(train, "epoch_loss", epoch),
              static_cast<float>(history.history["loss"][static_cast<size_t>(epoch)]));
    EXPECT_EQ(find(train, "epoch_accuracy", epoch),
              static_cast<float>(history.history["accuracy"][static_cast<size_t>(epoch)]));
    EXPECT_EQ(find(validation, "epoch_loss", epoch),
              static_cast<float>(history.history["val_loss"][static_cast<size_t>(epoch)]));
    EXPECT_EQ(find(validation, "epoch_accuracy", epoch),
              static_cast<float>(history.history["val_accuracy"][static_cast<size_t>(epoch)]));
  }
  // Batch summaries every 2 global steps: steps 2, 4 and 6.
  for (int64_t step : {2, 4, 6}) EXPECT_TRUE(find(train, "batch_loss", step)) << step;
  EXPECT_FALSE(find(train, "batch_loss", 3));
}

// histogram_freq 2 over 3 epochs: a histogram of every weight at epochs 0 and 2, none at 1,
// decoded with TensorBoard's schema; the last ones describe the weights fit ends with.
TEST(KerasCallbacksTest, TensorBoardWritesWeightHistogramsEveryHistogramFreqEpochs) {
  testing::TempDir dir;
  Model model = compiled_cnn(MirroredStrategy({"cpu:0", "cpu:1"}));
  FitOptions options = quiet(3);
  options.steps_per_epoch = 2;
  options.callbacks = {std::make_shared<callbacks::TensorBoard>(dir.file("tb"), 0, 2)};
  model.fit(testing::equivalence_data(), options);

  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("tb/train")))
    files.push_back(entry.path().string());
  ASSERT_EQ(files.size(), 1u);
  std::string error;
  std::map<std::pair<std::string, int64_t>, std::string> histograms;  // (tag, step) -> text
  for (const auto& event : testing::read_histogram_events(files[0], dir.path(), &error))
    histograms[{event.tag, event.step}] = event.text;
  ASSERT_EQ(error, "");
  const auto weights = model.weights();
  EXPECT_EQ(histograms.size(), 2 * weights.size());
  for (const auto& [name, value] : weights) {
    std::string tag_of = name;
    std::replace(tag_of.begin(), tag_of.end(), '.', '/');
    EXPECT_EQ(histograms.count({tag_of, 1}), 0u) << tag_of;
    ASSERT_EQ(histograms.count({tag_of, 0}), 1u) << tag_of;
    ASSERT_EQ(histograms.count({tag_of, 2}), 1u) << tag_of;
    const std::string& last = histograms[{tag_of, 2}];
    std::smatch num, max;
    ASSERT_TRUE(std::regex_search(last, num, std::regex(R"re(num: (\S+))re"))) << last;
    EXPECT_EQ(std::stod(num[1]), static_cast<double>(value.numel())) << tag_of;
    ASSERT_TRUE(std::regex_search(last, max, std::regex(R"re(max: (\S+))re"))) << last;
    EXPECT_EQ(std::stod(max[1]), value.max().item<double>()) << tag_of;
  }
}

// Throws at a given global step, as a crash would stop the process.
struct CrashAt : Callback {
  int64_t step;
  explicit CrashAt(int64_t s) : step(s) {}
  void on_train_batch_end(int64_t, const Logs&) override {
    if (model().global_step() == step) throw std::runtime_error("simulated crash");
  }
};

TEST(KerasBackupAndRestoreTest, AFitStoppedMidEpochResumesAtTheStepBitForBit) {
  testing::TempDir dir;
  Strategy strategy = MirroredStrategy({"cpu:0", "cpu:1"});
  torch::manual_seed(11);
  auto x = torch::rand({120, 1, 28, 28});
  auto y = torch::randint(0, 10, {120});
  auto data = data::Dataset::from_tensor_slices({x, y}).shuffle(120, 3).batch(16);  // 8 steps
  auto fit = [&](std::vector<std::shared_ptr<Callback>> callbacks) {
    Model model = compiled_cnn(strategy);
    FitOptions options = quiet(3);
    options.validation_data = data::Dataset::from_tensor_slices({x, y}).batch(40);
    options.callbacks = std::move(callbacks);
    History history = model.fit(data, options);
    return std::make_pair(testing::weight_values(model), history);
  };
  const auto [uninterrupted, full_history] = fit({});

  auto backup = std::make_shared<callbacks::BackupAndRestore>(dir.file("backup"), 3);
  EXPECT_THROW(fit({backup, std::make_shared<CrashAt>(12)}), std::runtime_error);
  EXPECT_TRUE(std::filesystem::exists(dir.file("backup/ckpt-12.safetensors")));
  // Step 12 is in epoch 1 (steps 9-16), saved by save_freq 3 just before the crash.
  auto resumed_backup = std::make_shared<callbacks::BackupAndRestore>(dir.file("backup"), 3);
  const auto [resumed, history] = fit({resumed_backup});
  EXPECT_EQ(resumed_backup->resumed_at_step(), 12);
  ASSERT_EQ(resumed.size(), uninterrupted.size());
  for (size_t i = 0; i < resumed.size(); ++i)
    EXPECT_TRUE(torch::equal(resumed[i], uninterrupted[i]));
  // The resumed epoch reports what the uninterrupted one did (its metric sums were restored).
  EXPECT_EQ(history.epoch, (std::vector<int>{1, 2}));
  EXPECT_EQ(history.history.at("loss")[0], full_history.history.at("loss")[1]);
  EXPECT_EQ(history.history.at("accuracy")[0], full_history.history.at("accuracy")[1]);
  EXPECT_EQ(history.history.at("val_loss")[1], full_history.history.at("val_loss")[2]);
  // A completed fit deletes the backup, so the next fit starts afresh (delete_checkpoint).
  EXPECT_FALSE(std::filesystem::exists(dir.file("backup")));
}

// Stops fit at a given global step, as a step limit does.
struct StopAt : Callback {
  int64_t step;
  explicit StopAt(int64_t s) : step(s) {}
  void on_train_batch_end(int64_t, const Logs&) override {
    if (model().global_step() == step) model().set_stop_training(true);
  }
};

TEST(KerasBackupAndRestoreTest, AFitStoppedWithinAnEpochKeepsItsBackupAndResumesThere) {
  testing::TempDir dir;
  Strategy strategy = MirroredStrategy({"cpu:0", "cpu:1"});
  auto fit = [&](std::vector<std::shared_ptr<Callback>> callbacks) {
    Model model = compiled_cnn(strategy);
    FitOptions options = quiet(2);
    options.callbacks = std::move(callbacks);
    History history = model.fit(testing::equivalence_data(), options);  // 20 steps an epoch
    return std::make_pair(testing::weight_values(model), history);
  };
  const auto [uninterrupted, full_history] = fit({});
  // No save_freq: only the stop (step 25, in epoch 1) is saved, by the callback after StopAt.
  auto backup = std::make_shared<callbacks::BackupAndRestore>(dir.file("backup"));
  const auto [stopped, stopped_history] = fit({std::make_shared<StopAt>(25), backup});
  EXPECT_EQ(stopped_history.epoch, (std::vector<int>{0}));  // the partial epoch is not recorded
  EXPECT_TRUE(std::filesystem::exists(dir.file("backup/ckpt-25.safetensors")));
  auto resumed_backup = std::make_shared<callbacks::BackupAndRestore>(dir.file("backup"));
  const auto [resumed, history] = fit({resumed_backup});
  EXPECT_EQ(resumed_backup->resumed_at_step(), 25);
  for (size_t i = 0; i < resumed.size(); ++i)
    EXPECT_TRUE(torch::equal(resumed[i], uninterrupted[i]));
  EXPECT_EQ(history.history.at("loss").back(), full_history.history.at("loss").back());
}

// Asks fit to stop as batch `at` of epoch 1 begins.
struct StopAtBatchBegin : Callback {
  int64_t at;
  explicit StopAtBatchBegin(int64_t a) : at(a) {}
  void on_train_batch_begin(int64_t batch, const Logs&) override {
    if (batch == at && model().global_step() >= 20) model().set_stop_training(true);
  }
};

// As in Keras, a step whose on_train_batch_begin asks to stop still runs under a synchronous
// strategy, and BackupAndRestore after it keeps that step (the step runner's gate; steps that
// run ahead of the loop are the exception, tested in tests/keras/ps_fit_test.cc).
TEST(KerasBackupAndRestoreTest, AStopAskedForAsABatchBeginsRunsThatBatchAndIsKept) {
  testing::TempDir dir;
  Model model = compiled_cnn(MirroredStrategy({"cpu:0", "cpu:1"}));
  FitOptions options = quiet(2);
  auto backup = std::make_shared<callbacks::BackupAndRestore>(dir.file("backup"));
  options.callbacks = {std::make_shared<StopAtBatchBegin>(4), backup};
  const History history = model.fit(testing::equivalence_data(), options);  // 20 steps an epoch
  EXPECT_EQ(model.global_step(), 25);
  EXPECT_EQ(history.epoch, (std::vector<int>{0}));
  EXPECT_TRUE(std::filesystem::exists(dir.file("backup/ckpt-25.safetensors")));
}

TEST(KerasBackupAndRestoreTest, ALearningRateScheduleContinuesFromTheEpochsStartingRate) {
  // The schedule halves the current rate each epoch; a resume within epoch 1 must not halve
  // the already-halved rate again.
  testing::TempDir dir;
  Strategy strategy = OneDeviceStrategy("cpu:0");
  auto halve = [] {
    return std::make_shared<callbacks::LearningRateScheduler>(
        [](int epoch, double lr) { return epoch == 0 ? lr : lr / 2; });
  };
  auto fit = [&](std::vector<std::shared_ptr<Callback>> callbacks) {
    Model model = compiled_cnn(strategy, optimizers::SGD(0.1));
    FitOptions options = quiet(3);
    options.steps_per_epoch = 5;
    options.callbacks = std::move(callbacks);
    History history = model.fit(testing::equivalence_data(), options);
    return std::make_pair(testing::weight_values(model), history);
  };
  const auto [uninterrupted, full_history] = fit({halve()});
  auto backup = std::make_shared<callbacks::BackupAndRestore>(dir.file("backup"), 1);
  EXPECT_THROW(fit({halve(), backup, std::make_shared<CrashAt>(7)}), std::runtime_error);
  const auto [resumed, history] =
      fit({halve(), std::make_shared<callbacks::BackupAndRestore>(dir.file("backup"), 1)});
  EXPECT_EQ(history.history.at("lr"), (std::vector<double>{0.05, 0.025}));
  for (size_t i = 0; i < resumed.size(); ++i)
    EXPECT_TRUE(torch::equal(resumed[i], uninterrupted[i]));
}

}  // namespace
}  // namespace dist::keras
