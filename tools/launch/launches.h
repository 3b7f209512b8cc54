// How each task of a job is started: on this machine (the command itself), or on a host of
// --hosts through --host-command (launches.cc's top comment).
#pragma once

#include <string>
#include <vector>

#include "job_setup.h"
#include "task.h"

namespace dist::launch {

// A task on this machine: the command itself, with TF_CONFIG `config` and the job's variables
// (DIST_REPLICAS_PER_WORKER, DIST_RESTART_COUNT, DIST_JOB_ID, DIST_JOB_TOKEN, ...).
Launch local_launch(const JobSetup& setup, const std::string& config);

// Each worker's Launch: on free loopback ports, or with --hosts at its host's address, on
// port_base plus its number among the earlier workers of that host (a port free on a remote
// host cannot be probed from here: --port-base names one).
std::vector<Launch> worker_launches(const JobSetup& setup);

}  // namespace dist::launch
