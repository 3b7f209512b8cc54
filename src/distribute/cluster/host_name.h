// What makes a host name usable in a cluster address, checked before any socket is opened: a
// name from TF_CONFIG, Slurm's node list or MPI's host list that holds a ';' or runs to
// thousands of characters would otherwise fail only at bind or connect time, and less clearly.
#pragma once

#include <string>

namespace dist::detail {

// "" when `host` is a host name, an IPv4 address or an IPv6 literal (letters, digits, '.', '-',
// '_', ':', '[', ']'; 1 to 253 characters); otherwise what is wrong with it.
std::string host_name_problem(const std::string& host);

}  // namespace dist::detail
