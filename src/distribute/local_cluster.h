// A cluster of worker processes on this machine (127.0.0.1), for dist-launch and tests.
#pragma once

#include <string>
#include <vector>

namespace dist {

// n distinct TCP ports on 127.0.0.1 that were free a moment ago (bound, then released).
std::vector<int> free_loopback_ports(int n);

// TF_CONFIG text for workers at 127.0.0.1:ports[i], as task worker:index.
std::string local_tf_config(const std::vector<int>& ports, int index);

}  // namespace dist
