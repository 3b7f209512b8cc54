// The members of a job as dist-store-host's --members value: task names in rank order, with a
// run of one task type's consecutive indices written as a range ("chief:0,worker:0-19999"), so
// that the command line of a 20,000-task job stays a few bytes long (one argument may hold at
// most 128 KiB on Linux, and the whole list would need about 240 KiB).
#pragma once

#include <string>
#include <vector>

namespace dist::collective {

// "worker:0,worker:1,worker:2,ps:0" -> "worker:0-2,ps:0". Names that are not "type:index" are
// kept as they are.
std::string compact_member_list(const std::vector<std::string>& members);

// The inverse: ranges are expanded, other names kept. An empty string gives no member.
// Throws InvalidArgument for a range that runs backwards or names more than 10 million tasks.
std::vector<std::string> expand_member_list(const std::string& text);

}  // namespace dist::collective
