// Process-wide guards for transport libraries that can take the process down on their own:
// a transport installs them before it opens its first connection (gloo/ does).
#pragma once

#include <string>

namespace dist::collective {

// A write to a peer that just died raises SIGPIPE when a library writes to its sockets without
// MSG_NOSIGNAL (Gloo does), and SIGPIPE's default action kills this process (exit 141) before
// the failed write can be reported as "lost worker". Ignored unless the program installed its
// own handling.
void ignore_sigpipe_unless_handled();

// Backstop for errors a transport library raises on its own threads, where nothing can catch
// them (with ProcessGroupSpec::check_collectives they should not happen): an uncaught exception
// whose message contains `source_marker` (Gloo's carry their source path: "gloo/") ends the
// process with "distribute: fatal: <library> failed on its own thread: ..." and exit code 1,
// the documented code for a failure while training, instead of "terminate called ..." and
// SIGABRT. Anything else goes to the terminate handler that was there before. Idempotent.
void exit_on_uncaught_error_of(const std::string& library, const std::string& source_marker);

}  // namespace dist::collective
