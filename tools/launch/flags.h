// dist-launch's flags: declared on the command line parser, then read and checked into a
// JobSetup. Each check returns the message for a user's mistake ("" when there is none), which
// main prints before exiting with 2, as dist-train does for bad flags.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "job_setup.h"

namespace dist::launch {

// dist-launch's flags, into `setup` and `max_restarts`.
void add_flags(CLI::App& app, JobSetup& setup, int& max_restarts);

// --workers N or MIN:MAX into setup.workers and setup.min_workers. The error, or "".
std::string parse_workers(JobSetup& setup);

// --hosts: the port base from --port-base, DIST_PORT_BASE or the default, and --workers from
// the hosts when not given. The error, or "".
std::string apply_hosts(JobSetup& setup, bool hosts_given, bool workers_given);

// The error for flags that make no job, or "" when they make one. Raises the open-file limit
// the workers inherit as far as it goes (check_open_files in flags.cc says why).
std::string check_setup(const JobSetup& setup, int max_restarts);

}  // namespace dist::launch
