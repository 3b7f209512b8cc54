#include "dist/train/progress_bar.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <sstream>

namespace dist {
namespace {

std::string whole_seconds(double seconds) {
  std::ostringstream out;
  out << std::llround(seconds) << "s";
  return out.str();
}

}  // namespace

ProgressBar::ProgressBar(std::ostream& out, int64_t total, bool interactive)
    : out_(out),
      total_(total),
      interactive_(interactive),
      next_plain_step_(total > 0 ? std::max<int64_t>(1, total / 10) : 100),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

bool ProgressBar::stdout_is_terminal() { return isatty(fileno(stdout)) == 1; }

double ProgressBar::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string ProgressBar::counter(int64_t step) const {
  if (total_ <= 0) return std::to_string(step);
  std::ostringstream out;
  out << std::setw(static_cast<int>(std::to_string(total_).size())) << step << "/" << total_;
  return out.str();
}

std::string ProgressBar::bar(int64_t step) const {
  if (total_ <= 0) return "";
  constexpr int kWidth = 30;
  int filled = static_cast<int>(kWidth * std::min(step, total_) / total_);
  return " [" + std::string(static_cast<size_t>(filled), '=') + (filled < kWidth ? ">" : "") +
         std::string(static_cast<size_t>(std::max(0, kWidth - filled - 1)), '.') + "]";
}

void ProgressBar::update(int64_t step, const std::string& status) {
  std::string tail = status.empty() ? "" : " - " + status;
  if (interactive_) {
    // Redraw at most 10 times a second: a terminal is slower than a training step.
    auto now = std::chrono::steady_clock::now();
    bool last = total_ > 0 && step >= total_;
    if (!last && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    drawn_ = true;
    std::string timing = " - " + whole_seconds(elapsed());
    if (total_ > 0 && step > 0 && step < total_)
      timing = " - ETA: " + whole_seconds(elapsed() / step * (total_ - step));
    out_ << "\r" << counter(step) << bar(step) << timing << tail << "\033[K" << std::flush;
    return;
  }
  if (step < next_plain_step_ && !(total_ > 0 && step == total_)) return;
  while (next_plain_step_ <= step)
    next_plain_step_ += total_ > 0 ? std::max<int64_t>(1, total_ / 10) : 100;
  // Formatted apart: the caller's stream keeps its own precision and flags.
  std::ostringstream line;
  line << counter(step) << " - " << std::fixed << std::setprecision(1) << elapsed() << "s" << tail;
  out_ << line.str() << "\n" << std::flush;
}

void ProgressBar::finish() {
  if (interactive_ && drawn_) out_ << "\n" << std::flush;
  drawn_ = false;
}

void ProgressBar::finish(int64_t steps, const std::string& status) {
  const double seconds = elapsed();
  std::ostringstream line;
  line << counter(steps) << bar(steps) << " - " << whole_seconds(seconds) << " "
       << std::llround(1000.0 * seconds / static_cast<double>(std::max<int64_t>(steps, 1)))
       << "ms/step";
  if (!status.empty()) line << " - " << status;
  out_ << (interactive_ ? "\r" : "") << line.str() << (interactive_ ? "\033[K" : "") << "\n"
       << std::flush;
  drawn_ = false;
}

}  // namespace dist
