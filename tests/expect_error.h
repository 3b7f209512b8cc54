// Checks of the errors a test expects: which exception, and what its message says.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <initializer_list>
#include <string>
#include <utility>

#include "dist/core/error.h"
#include "test_util.h"

namespace dist::testing {

// The message of the E that fn() throws. A failure of the calling test, and "", when fn throws
// another exception or none (unlike message_of, whose "no exception" a caller must check).
template <class E, class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "an exception of another type was thrown: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected an exception, nothing was thrown";
  return "";
}

// Each of `parts` occurs in `message`; a failure of the calling test names each that does not.
inline void expect_contains(const std::string& message, std::initializer_list<std::string> parts) {
  for (const auto& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << "\"" << part << "\" not in: " << message;
}

// `part` occurs in `message` (expect_contains of one part).
inline void expect_contains(const std::string& message, const std::string& part) {
  expect_contains(message, {part});
}

// The message of the DataError that fn() throws (error_of: a failure when it throws another
// exception or none), for the readers' tests of corrupt input.
template <class Fn>
std::string data_error(Fn&& fn) {
  return error_of<DataError>(std::forward<Fn>(fn));
}

// The message of the DataError that fn() throws, or "no exception" (message_of): for tests that
// compare the outcome of two calls, which may both throw nothing.
template <class Fn>
std::string data_error_or_none(Fn&& fn) {
  return message_of<DataError>(std::forward<Fn>(fn));
}

}  // namespace dist::testing
