// Command-line helpers shared by the examples: strict parsing of numbers and strategy names, so
// that a typo exits with a message instead of training with a default or throwing from stoi.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>

#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"

namespace examples {

// A bad command line: main prints the message and the usage, and exits with status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The whole of `text` as an integer of at least `min`; UsageError naming `what` otherwise.
inline int64_t parse_int(const std::string& text, const std::string& what, int64_t min) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw UsageError(what + " must be an integer, got '" + text + "'");
  if (value < min)
    throw UsageError(what + " must be at least " + std::to_string(min) + ", got " + text);
  return value;
}

// The strategies the examples run under on one machine.
inline dist::Strategy make_strategy(const std::string& name) {
  if (name == "one_device") return dist::OneDeviceStrategy("cpu:0");
  if (name == "mirrored") return dist::MirroredStrategy();  // one replica per core
  if (name == "central_storage") return dist::CentralStorageStrategy();
  throw UsageError("unknown strategy '" + name + "'; use one_device, mirrored or central_storage");
}

// Runs body(); a UsageError prints the message and usage and gives exit status 2, any other
// exception its message and status 1 (the library's errors say what was wrong and what to do).
template <class Body>
int run_main(const std::string& usage, Body&& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::cerr << "error: " << e.what() << "\nusage: " << usage << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace examples
