#include "progress_bar.h"

#include <unistd.h>

#include <cstdio>
#include <iomanip>
#include <sstream>

namespace dist::tools {

ProgressBar::ProgressBar(std::ostream& out, int64_t total, bool interactive)
    : out_(out),
      total_(total),
      interactive_(interactive),
      next_plain_step_(total > 0 ? std::max<int64_t>(1, total / 10) : 100),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

bool ProgressBar::stdout_is_terminal() { return isatty(fileno(stdout)) == 1; }

void ProgressBar::update(int64_t step, const std::string& status) {
  auto now = std::chrono::steady_clock::now();
  double elapsed = std::chrono::duration<double>(now - start_).count();
  std::ostringstream line;
  if (total_ > 0) {
    line << std::setw(static_cast<int>(std::to_string(total_).size())) << step << "/" << total_;
  } else {
    line << step;
  }
  if (interactive_) {
    // Redraw at most 10 times a second: a terminal is slower than a training step.
    bool last = total_ > 0 && step >= total_;
    if (!last && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    drawn_ = true;
    constexpr int kWidth = 30;
    if (total_ > 0) {
      int filled = static_cast<int>(kWidth * step / total_);
      line << " [" << std::string(static_cast<size_t>(filled), '=') << (filled < kWidth ? ">" : "")
           << std::string(static_cast<size_t>(std::max(0, kWidth - filled - 1)), '.') << "]";
    }
    line << " - " << std::fixed << std::setprecision(0) << elapsed << "s - " << status;
    out_ << "\r" << line.str() << "\033[K" << std::flush;
    return;
  }
  if (step < next_plain_step_ && !(total_ > 0 && step == total_)) return;
  while (next_plain_step_ <= step)
    next_plain_step_ += total_ > 0 ? std::max<int64_t>(1, total_ / 10) : 100;
  line << " - " << std::fixed << std::setprecision(1) << elapsed << "s - " << status;
  out_ << line.str() << "\n" << std::flush;
}

void ProgressBar::finish() {
  if (interactive_ && drawn_) out_ << "\n" << std::flush;
  drawn_ = false;
}

}  // namespace dist::tools
