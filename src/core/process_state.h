// What one process can tell about another of the same machine: whether it ended. The shared-
// memory group and the elastic membership use it to see a lost worker at once instead of
// waiting for its heartbeat to go stale.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace dist::detail {

// The inode of this process's pid namespace (/proc/self/ns/pid): pids compare only within one.
uint64_t pid_namespace();

// Whether process `pid` (of this pid namespace) has ended: gone, or a zombie its parent has not
// reaped yet (a launcher busy elsewhere); kill(pid, 0) alone counts a zombie as alive.
bool process_ended(pid_t pid);

// This process as another one may check it later: "<boot id> <pid namespace> <pid>".
std::string process_identity();

// Whether the process `identity` (from process_identity) runs on this machine, in this pid
// namespace, and has ended. False when it cannot tell (another machine or namespace).
bool identified_process_ended(const std::string& identity);

}  // namespace dist::detail
