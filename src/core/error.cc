#include "dist/core/error.h"

namespace dist::detail {

void throw_internal(const char* file, int line, const char* expr, const std::string& message) {
  throw InternalError(concat("internal error (a bug in distribute, please report it): ", expr,
                             " failed at ", file, ":", line, message.empty() ? "" : ": ", message));
}

}  // namespace dist::detail
