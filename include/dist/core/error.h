// Error types of the library and the checks that raise them.
//
// Two kinds of failure are kept apart, as LibTorch does with TORCH_CHECK and
// TORCH_INTERNAL_ASSERT:
//   - the caller's mistake (bad argument, bad file, lost peer): a typed exception whose
//     message says what was wrong, with the values, and what to do;
//   - a bug in this library: InternalError, with file:line and the failed expression.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dist {

// Base of every exception the library throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The caller passed a value the library cannot use (bad flag, bad shape, wrong loss reduction).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A file is missing, truncated or inconsistent. The message names the file and the problem.
class DataError : public Error {
 public:
  using Error::Error;
};

// A collective failed: a peer was lost, timed out or called a different collective.
// The message names the replica or worker. The communicator must be recreated.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

// A stop signal (SIGTERM or SIGINT, caught by a PreemptionWatcher) arrived while the library
// waited for other processes (the rendezvous, a worker joining an elastic job): it gave up the
// wait. Not a CollectiveError: nobody was lost, the process was asked to stop.
class StopRequested : public Error {
 public:
  using Error::Error;
};

// An iterator has no element left (a scheduled step asked for more data than its worker's
// pass over the dataset holds).
class OutOfRange : public Error {
 public:
  using Error::Error;
};

// A broken invariant inside the library: always a bug to report.
class InternalError : public Error {
 public:
  using Error::Error;
};

namespace detail {

template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

[[noreturn]] void throw_internal(const char* file, int line, const char* expr,
                                 const std::string& message);

}  // namespace detail
}  // namespace dist

// Throws ExceptionType with the concatenated message parts when cond is false.
// Usage: DIST_CHECK(n > 0, dist::InvalidArgument, "batch size must be positive, got ", n);
#define DIST_CHECK(cond, ExceptionType, ...)                               \
  do {                                                                     \
    if (!(cond)) throw ExceptionType(::dist::detail::concat(__VA_ARGS__)); \
  } while (false)

// Shorthand for the most common check: a caller's argument.
#define DIST_CHECK_ARG(cond, ...) DIST_CHECK(cond, ::dist::InvalidArgument, __VA_ARGS__)

// A library invariant; failing it is a bug. Reports file:line and the expression.
#define DIST_INTERNAL_ASSERT(cond, ...)                                                      \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::dist::detail::throw_internal(__FILE__, __LINE__, #cond,                              \
                                     ::dist::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (false)
