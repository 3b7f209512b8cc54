// main() of dist_tests. The single-process suites run as one process per suite (LibTorch starts
// once, not once per case: tests/discover_tests.cmake), so a crash or a hang must still name the
// case it happened in. A listener keeps the running case's name ready in static buffers; a crash
// signal or the per-case alarm writes it to stderr with async-signal-safe calls only, before
// the process ends the way it would have without the listener.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "dist/core/blas_core.h"

namespace {

// A case that runs longer than this is taken as hung (the multi-process cases, one per ctest
// test, also have ctest's timeout; this one names the case inside a grouped suite).
constexpr unsigned kDefaultCaseSeconds = 300;

char crash_message[1024];
char hang_message[1024];
size_t crash_length = 0;
size_t hang_length = 0;

void write_all(const char* text, size_t length) {
  while (length > 0) {
    const ssize_t written = ::write(STDERR_FILENO, text, length);
    if (written <= 0) return;
    text += written;
    length -= static_cast<size_t>(written);
  }
}

void on_crash(int signal_number) {
  write_all(crash_message, crash_length);
  // The signal's number as text, without snprintf (not async-signal-safe).
  char digits[4] = {static_cast<char>('0' + signal_number / 10 % 10),
                    static_cast<char>('0' + signal_number % 10), '\n', '\0'};
  write_all(digits, 3);
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

void on_alarm(int) {
  write_all(hang_message, hang_length);
  _exit(124);  // what timeout(1) returns for a command it stopped
}

unsigned case_seconds() {
  const char* text = std::getenv("DIST_TEST_CASE_SECONDS");
  if (text == nullptr || *text == '\0') return kDefaultCaseSeconds;
  const long value = std::strtol(text, nullptr, 10);
  return value > 0 ? static_cast<unsigned>(value) : kDefaultCaseSeconds;
}

class CaseWatch : public testing::EmptyTestEventListener {
 public:
  explicit CaseWatch(unsigned seconds) : seconds_(seconds) {
    crash_length = keep(crash_message, "\n[ CRASHED  ] outside any case: ended by signal ");
    for (int signal_number : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
      std::signal(signal_number, on_crash);
    }
    std::signal(SIGALRM, on_alarm);
  }

  void OnTestStart(const testing::TestInfo& info) override {
    const std::string name = std::string(info.test_suite_name()) + "." + info.name();
    crash_length = keep(crash_message, "\n[ CRASHED  ] " + name + ": ended by signal ");
    hang_length = keep(hang_message, "\n[ HUNG     ] " + name + ": still running after " +
                                         std::to_string(seconds_) +
                                         " s (DIST_TEST_CASE_SECONDS); the process is stopped\n");
    alarm(seconds_);
  }

  void OnTestEnd(const testing::TestInfo&) override {
    alarm(0);
    crash_length = keep(crash_message, "\n[ CRASHED  ] between cases: ended by signal ");
  }

 private:
  // Copies `text` into a static buffer that the signal handlers may read.
  static size_t keep(char (&buffer)[1024], const std::string& text) {
    const size_t length = std::min(text.size(), sizeof buffer);
    std::memcpy(buffer, text.data(), length);
    return length;
  }

  unsigned seconds_;
};

}  // namespace

int main(int argc, char** argv) {
  // The processes a test starts inherit it: their OpenMP threads sleep when idle rather than
  // spin on cores the test's other processes need (scripts/test.sh says why; it sets it for
  // this process too, which reads it as it loads).
  setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
  // Before any case: every product of this process runs on one OpenBLAS core, and the processes
  // the cases start (workers, dist-train, python3) start on it (dist/core/blas_core.h).
  dist::choose_openblas_core();
  testing::InitGoogleTest(&argc, argv);
  testing::UnitTest::GetInstance()->listeners().Append(new CaseWatch(case_seconds()));
  return RUN_ALL_TESTS();
}
