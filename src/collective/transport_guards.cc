#include "collective/transport_guards.h"

#include <signal.h>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <mutex>
#include <utility>
#include <vector>

namespace dist::collective {
namespace {

std::mutex guarded_mu;
std::vector<std::pair<std::string, std::string>> guarded;  // (library, source marker)
std::terminate_handler previous_terminate = nullptr;

std::string current_exception_text() {
  if (auto error = std::current_exception()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
    }
  }
  return "";
}

[[noreturn]] void on_uncaught_exception() {
  const std::string what = current_exception_text();
  std::string library;
  {
    std::lock_guard<std::mutex> lock(guarded_mu);
    for (const auto& [name, marker] : guarded)
      if (what.find(marker) != std::string::npos) library = name;
  }
  if (library.empty()) {
    if (previous_terminate != nullptr) previous_terminate();
    std::abort();
  }
  std::cerr << "distribute: fatal: " << library << " failed on its own thread: " << what
            << "\n(the workers sent messages that do not match: they issued different "
               "collectives; start every worker with the same settings and the same program)"
            << std::endl;
  std::_Exit(1);
}

}  // namespace

void ignore_sigpipe_unless_handled() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
}

void exit_on_uncaught_error_of(const std::string& library, const std::string& source_marker) {
  static std::once_flag once;
  std::call_once(once, [] { previous_terminate = std::set_terminate(on_uncaught_exception); });
  std::lock_guard<std::mutex> lock(guarded_mu);
  for (const auto& g : guarded)
    if (g.second == source_marker) return;
  guarded.emplace_back(library, source_marker);
}

}  // namespace dist::collective
