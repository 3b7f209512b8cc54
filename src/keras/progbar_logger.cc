#include <cmath>
#include <cstdio>

#include "dist/keras/callbacks.h"
#include "dist/train/progress_bar.h"

namespace dist::keras {
namespace {

std::string number(double value) {
  char text[32];
  double magnitude = std::fabs(value);
  std::snprintf(text, sizeof text, magnitude != 0 && magnitude < 1e-3 ? "%.4e" : "%.4f", value);
  return text;
}

bool is_validation(const std::string& key) { return key.rfind("val_", 0) == 0; }

}  // namespace

ProgbarLogger::ProgbarLogger(std::ostream& out) : out_(out) {}
ProgbarLogger::~ProgbarLogger() = default;

std::string ProgbarLogger::format(const Logs& logs) {
  std::string text;
  auto add = [&](const std::string& key, double value) {
    text += (text.empty() ? "" : " - ") + key + ": " + number(value);
  };
  for (int part = 0; part < 4; ++part) {  // loss, metrics, val_loss, val_ metrics
    for (const auto& [key, value] : logs) {
      bool validation = is_validation(key);
      bool loss = key == (validation ? "val_loss" : "loss");
      if (validation == (part >= 2) && loss == (part % 2 == 0)) add(key, value);
    }
  }
  return text;
}

void ProgbarLogger::on_train_begin(const Logs&) { in_fit_ = true; }
void ProgbarLogger::on_train_end(const Logs&) { in_fit_ = false; }

void ProgbarLogger::on_epoch_begin(int epoch, const Logs&) {
  auto epochs = params().find("epochs");
  out_ << "Epoch " << epoch + 1;
  if (epochs != params().end()) out_ << "/" << static_cast<int64_t>(epochs->second);
  out_ << std::endl;
  const auto steps = params().find("steps");
  const auto verbose = params().find("verbose");
  bar_ = std::make_unique<ProgressBar>(
      out_, steps == params().end() ? -1 : static_cast<int64_t>(steps->second),
      ProgressBar::stdout_is_terminal() && &out_ == &std::cout);
  // verbose 2: only the epoch's final line.
  verbose_ = verbose == params().end() ? 1 : static_cast<int>(verbose->second);
  steps_done_ = 0;
}

void ProgbarLogger::on_train_batch_end(int64_t batch, const Logs& logs) {
  steps_done_ = batch + 1;
  if (bar_ && verbose_ == 1) bar_->update(steps_done_, format(logs));
}

void ProgbarLogger::on_epoch_end(int, Logs& logs) {
  if (!bar_) bar_ = std::make_unique<ProgressBar>(out_, -1, false);
  bar_->finish(steps_done_, format(logs));
  bar_.reset();
}

void ProgbarLogger::on_test_begin(const Logs&) {
  if (in_fit_) return;  // validation inside fit shows no bar of its own, as in Keras
  const auto steps = params().find("steps");
  bar_ = std::make_unique<ProgressBar>(
      out_, steps == params().end() ? -1 : static_cast<int64_t>(steps->second),
      ProgressBar::stdout_is_terminal() && &out_ == &std::cout);
  steps_done_ = 0;
}

void ProgbarLogger::on_test_batch_end(int64_t batch, const Logs& logs) {
  if (in_fit_ || !bar_) return;
  steps_done_ = batch + 1;
  bar_->update(steps_done_, format(logs));
}

void ProgbarLogger::on_test_end(const Logs& logs) {
  if (in_fit_ || !bar_) return;
  bar_->finish(steps_done_, format(logs));
  bar_.reset();
}

}  // namespace dist::keras
