// Progress of an epoch: a bar redrawn in place on a terminal, plain lines otherwise (so logs
// and pipes stay readable).
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace dist::tools {

class ProgressBar {
 public:
  // total: steps in the epoch, or -1 when unknown. interactive: redraw in place.
  ProgressBar(std::ostream& out, int64_t total, bool interactive);

  // Reports that `step` steps are done; `status` is appended ("loss: 0.41 - accuracy: 0.85").
  void update(int64_t step, const std::string& status);
  // Ends the bar's line (interactive mode) so the next output starts on a fresh line.
  void finish();

  // True when stdout is a terminal.
  static bool stdout_is_terminal();

 private:
  std::ostream& out_;
  int64_t total_;
  bool interactive_;
  int64_t next_plain_step_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  bool drawn_ = false;
};

}  // namespace dist::tools
