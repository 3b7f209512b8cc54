// Progress of an epoch, in Keras' format: a bar redrawn in place on a terminal, plain lines
// otherwise (so logs and pipes stay readable).
//
//   during:  " 412/938 [=============>................] - ETA: 4s - loss: 0.4312 - accuracy: 0.84"
//   at end:  "938/938 [==============================] - 8s 9ms/step - loss: 0.2076 - ..."
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace dist {

class ProgressBar {
 public:
  // total: steps in the epoch, or -1 when unknown. interactive: redraw in place; otherwise a
  // line every tenth of the epoch (every 100 steps when the total is unknown).
  ProgressBar(std::ostream& out, int64_t total, bool interactive);

  // Reports that `step` steps are done; `status` is appended ("loss: 0.41 - accuracy: 0.85").
  void update(int64_t step, const std::string& status);
  // Ends the bar's line (interactive mode) so the next output starts on a fresh line.
  void finish();
  // Writes the epoch's final line, "N/N [====] - 8s 9ms/step - <status>", replacing the bar.
  void finish(int64_t steps, const std::string& status);

  // True when stdout is a terminal.
  static bool stdout_is_terminal();

 private:
  std::string counter(int64_t step) const;
  std::string bar(int64_t step) const;
  double elapsed() const;

  std::ostream& out_;
  int64_t total_;
  bool interactive_;
  int64_t next_plain_step_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  bool drawn_ = false;
};

}  // namespace dist
