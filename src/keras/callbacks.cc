// ModelCheckpoint, EarlyStopping, LearningRateScheduler, CSVLogger and TensorBoard, and the
// Monitor they share. BackupAndRestore is in backup_and_restore.cc, ProgbarLogger in
// progbar_logger.cc.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <regex>
#include <sstream>

#include "dist/core/env.h"
#include "dist/core/error.h"
#include "dist/keras/callbacks.h"
#include "dist/keras/model.h"
#include "dist/train/summary_writer.h"

namespace dist::keras {

namespace {

bool maximize_for(const std::string& key, const std::string& mode) {
  DIST_CHECK_ARG(mode == "auto" || mode == "min" || mode == "max", "unknown mode '", mode,
                 "' for monitoring '", key, "': use auto, min or max");
  if (mode != "auto") return mode == "max";
  return key.find("acc") != std::string::npos || key.find("auc") != std::string::npos;
}

std::string available_keys(const Logs& logs) {
  std::string keys;
  for (const auto& [key, value] : logs) keys += (keys.empty() ? "" : ", ") + key;
  return keys.empty() ? "none" : keys;
}

}  // namespace

Monitor::Monitor(std::string key, const std::string& mode, double min_delta)
    : key_(std::move(key)), maximize_(maximize_for(key_, mode)), min_delta_(std::fabs(min_delta)) {
  reset();
}

void Monitor::reset() {
  best_ = maximize_ ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
}

std::optional<double> Monitor::value(const Logs& logs) {
  auto it = logs.find(key_);
  if (it != logs.end()) return it->second;
  if (!warned_) {
    std::cerr << "Warning: the monitored value '" << key_
              << "' is not in the logs (available: " << available_keys(logs)
              << "); pass validation_data for val_ entries" << std::endl;
    warned_ = true;
  }
  return std::nullopt;
}

bool Monitor::improves(double value) const {
  return maximize_ ? value - min_delta_ > best_ : value + min_delta_ < best_;
}

namespace callbacks {

ModelCheckpoint::ModelCheckpoint(std::string filepath, std::string monitor, bool save_best_only,
                                 const std::string& mode)
    : filepath_(std::move(filepath)),
      monitor_(std::move(monitor), mode),
      save_best_only_(save_best_only) {
  DIST_CHECK_ARG(!filepath_.empty(), "ModelCheckpoint: the file path is empty");
}

std::string ModelCheckpoint::path_for(int epoch, const Logs& logs) const {
  // "{key}" or "{key:format}" with a printf conversion such as 02d or .4f.
  static const std::regex field(
      R"(\{([A-Za-z_][A-Za-z0-9_]*)(?::(0?[0-9]*(?:\.[0-9]+)?)([dfeg]))?\})");
  std::string out;
  auto begin = filepath_.cbegin();
  for (std::sregex_iterator it(filepath_.begin(), filepath_.end(), field), end; it != end; ++it) {
    const std::smatch& m = *it;
    out.append(begin, m[0].first);
    begin = m[0].second;
    const std::string key = m[1];
    double value = epoch + 1;
    if (key != "epoch") {
      auto found = logs.find(key);
      DIST_CHECK_ARG(found != logs.end(), "ModelCheckpoint: the file path '", filepath_,
                     "' names {", key, "}, which is not in the logs (available: epoch, ",
                     available_keys(logs), ")");
      value = found->second;
    }
    char text[64];
    const std::string conversion = m[3].matched ? m[3].str() : (key == "epoch" ? "d" : "f");
    const std::string spec = "%" + m[2].str() + (conversion == "d" ? "lld" : conversion);
    if (conversion == "d")
      std::snprintf(text, sizeof text, spec.c_str(), static_cast<long long>(std::llround(value)));
    else
      std::snprintf(text, sizeof text, spec.c_str(), value);
    out += text;
  }
  out.append(begin, filepath_.cend());
  return out;
}

void ModelCheckpoint::on_epoch_end(int epoch, Logs& logs) {
  if (save_best_only_) {
    std::optional<double> value = monitor_.value(logs);
    if (!value || !monitor_.improves(*value)) return;
    monitor_.set_best(*value);
  }
  const std::string path = path_for(epoch, logs);
  model().gather_weights();  // every worker: under sharding 'parameters' each keeps shares
  if (model().is_chief()) {
    std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    model().save_weights(path);
  }
  saved_.push_back(path);
}

EarlyStopping::EarlyStopping(std::string monitor, int patience, double min_delta,
                             const std::string& mode, bool restore_best_weights)
    : monitor_(std::move(monitor), mode, min_delta),
      patience_(patience),
      restore_best_weights_(restore_best_weights) {
  DIST_CHECK_ARG(patience >= 0, "EarlyStopping: patience must be at least 0, got ", patience);
}

void EarlyStopping::on_train_begin(const Logs&) {
  monitor_.reset();
  wait_ = 0;
  stopped_epoch_ = best_epoch_ = -1;
  best_weights_.clear();
}

void EarlyStopping::on_epoch_end(int epoch, Logs& logs) {
  std::optional<double> value = monitor_.value(logs);
  if (!value) return;
  // Every worker sees the same epoch logs, so every worker stops at the same epoch.
  ++wait_;
  if (monitor_.improves(*value)) {
    monitor_.set_best(*value);
    best_epoch_ = epoch;
    wait_ = 0;
    if (restore_best_weights_) {
      best_weights_.clear();
      model().gather_weights();  // every worker calls on_epoch_end
      for (const auto& [name, tensor] : model().weights())
        best_weights_.emplace_back(name, tensor.detach().clone());
    }
    return;
  }
  if (wait_ >= patience_ && epoch > 0) {
    stopped_epoch_ = epoch;
    model().set_stop_training(true);
    if (restore_best_weights_ && !best_weights_.empty()) model().set_weights(best_weights_);
  }
}

LearningRateScheduler::LearningRateScheduler(Schedule schedule) : schedule_(std::move(schedule)) {
  DIST_CHECK_ARG(schedule_ != nullptr, "LearningRateScheduler: the schedule is empty");
}

void LearningRateScheduler::on_epoch_begin(int epoch, const Logs&) {
  double rate = schedule_(epoch, model().learning_rate());
  DIST_CHECK_ARG(std::isfinite(rate) && rate >= 0, "LearningRateScheduler: the schedule gave ",
                 rate, " for epoch ", epoch, "; a learning rate must be finite and >= 0");
  model().set_learning_rate(rate);
}

void LearningRateScheduler::on_epoch_end(int, Logs& logs) { logs["lr"] = model().learning_rate(); }

CSVLogger::CSVLogger(std::string filename, char separator, bool append)
    : filename_(std::move(filename)), separator_(separator), append_(append) {
  DIST_CHECK_ARG(!filename_.empty(), "CSVLogger: the file name is empty");
}
CSVLogger::~CSVLogger() = default;

void CSVLogger::on_train_begin(const Logs&) {
  keys_.clear();
  if (!model().is_chief()) return;
  if (append_) {
    // Continue under the existing header, so a resumed fit adds rows to the same table.
    std::ifstream existing(filename_);
    std::string header, key;
    if (std::getline(existing, header)) {
      std::stringstream fields(header);
      while (std::getline(fields, key, separator_))
        if (key != "epoch") keys_.push_back(key);
    }
  }
  std::filesystem::path parent = std::filesystem::path(filename_).parent_path();
  Env* env = Env::Default();
  if (!parent.empty()) env->create_dirs(parent.string());
  try {
    file_ = append_ ? env->new_appendable_file(filename_) : env->new_writable_file(filename_);
  } catch (const DataError& e) {
    throw InvalidArgument(
        ::dist::detail::concat("CSVLogger: cannot write '", filename_, "': ", e.what()));
  }
}

void CSVLogger::on_epoch_end(int epoch, Logs& logs) {
  if (!file_) return;
  std::vector<std::string> keys;
  for (const auto& [key, value] : logs) keys.push_back(key);
  std::ostringstream rows;
  if (keys != keys_) {  // the first epoch, or new entries (Keras would fail; a header is kinder)
    keys_ = keys;
    rows << "epoch";
    for (const auto& key : keys_) rows << separator_ << key;
    rows << "\n";
  }
  rows << epoch;  // 0-based, as Keras writes it
  char text[32];
  for (const auto& key : keys_) {
    std::snprintf(text, sizeof text, "%.10g", logs.at(key));
    rows << separator_ << text;
  }
  rows << "\n";
  // One write per epoch, unbuffered: the file is complete after every epoch.
  const std::string bytes = rows.str();
  file_->append(bytes.data(), bytes.size());
}

void CSVLogger::on_train_end(const Logs&) {
  if (!file_) return;
  std::unique_ptr<WritableFile> file = std::move(file_);
  file->close();
}

void CSVLogger::on_train_abort() { on_train_end({}); }

TensorBoard::TensorBoard(std::string log_dir, int64_t update_freq, int histogram_freq)
    : log_dir_(std::move(log_dir)), update_freq_(update_freq), histogram_freq_(histogram_freq) {
  DIST_CHECK_ARG(update_freq >= 0,
                 "TensorBoard: update_freq must be 0 (epochs only) or a "
                 "number of steps, got ",
                 update_freq);
  DIST_CHECK_ARG(histogram_freq >= 0,
                 "TensorBoard: histogram_freq must be 0 (no histograms) or a number of epochs, "
                 "got ",
                 histogram_freq);
}
TensorBoard::~TensorBoard() = default;

void TensorBoard::on_train_begin(const Logs&) {
  if (!model().is_chief()) return;
  train_ = std::make_unique<SummaryWriter>(log_dir_ + "/train");
  validation_.reset();
}

void TensorBoard::on_train_batch_end(int64_t, const Logs& logs) {
  if (!train_ || update_freq_ == 0) return;
  const int64_t step = model().global_step();
  if (step % update_freq_ != 0) return;
  for (const auto& [key, value] : logs) train_->scalar("batch_" + key, value, step);
}

void TensorBoard::on_epoch_end(int epoch, Logs& logs) {
  if (histogram_freq_ > 0 && epoch % histogram_freq_ == 0) write_histograms(epoch);
  if (!train_) return;
  for (const auto& [key, value] : logs) {
    if (key.rfind("val_", 0) == 0) {
      if (!validation_) validation_ = std::make_unique<SummaryWriter>(log_dir_ + "/validation");
      validation_->scalar("epoch_" + key.substr(4), value, epoch);
    } else {
      train_->scalar("epoch_" + key, value, epoch);
    }
  }
  train_->flush();
  if (validation_) validation_->flush();
}

void TensorBoard::write_histograms(int epoch) {
  model().gather_weights();  // every worker: under sharding 'parameters' each keeps shares
  if (!train_) return;
  for (const std::string& refused : train_->weight_histograms(model().weights(), epoch))
    std::cerr << "TensorBoard: no histogram at epoch " << epoch << ": " << refused << std::endl;
}

void TensorBoard::on_train_end(const Logs&) {
  train_.reset();
  validation_.reset();
}

}  // namespace callbacks
}  // namespace dist::keras
