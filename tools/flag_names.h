// The library's errors name the library's options (CommunicationOptions::backend, a strategy's
// coordinator_timeout, ...), as a program using the library sets them; dist-train's user sets
// flags instead. tool_message adds, to a message that names such an option, the flag that sets
// it: "... (CommunicationOptions::backend) [dist-train: --collective-backend]".
#pragma once

#include <string>

namespace dist::tools {

std::string tool_message(const std::string& library_message);

}  // namespace dist::tools
