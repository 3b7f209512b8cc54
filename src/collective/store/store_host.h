// Starting the rendezvous store's host process, dist-store-host (tools/dist_store_host.cc),
// from the chief. The store lives outside the chief so that a crashed chief does not take it
// down with it (the survivors need it to name the lost worker); see docs/design.md,
// "MultiWorkerMirroredStrategy".
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "dist/core/host_port.h"

namespace dist::collective {

// dist-store-host listens within milliseconds on an idle machine, but a loaded one may not run
// it for seconds. Everyone waits that much longer for the store than the rendezvous timeout, so
// a short timeout does not count the host's start against the chief.
constexpr std::chrono::milliseconds kStoreHostStartAllowance{5000};

struct StoreHostChoice {
  // Empty: host the store inside the chief (DIST_STORE_HOST=chief, or no binary found).
  std::string binary;
  // Set when no binary was found (rather than chosen): the caller should warn.
  bool missing = false;
};

// $DIST_STORE_HOST (a path, or "chief"), else the installed dist-store-host, else the one in
// the build tree. Throws InvalidArgument if DIST_STORE_HOST names no executable file.
StoreHostChoice locate_store_host();

// One line for stderr when locate_store_host() found nothing.
std::string missing_store_host_warning();

struct StoreHostRequest {
  std::string binary;
  HostPort at;
  std::vector<std::string> members;  // task names in collective rank order
  std::chrono::milliseconds rendezvous_timeout;
  std::chrono::milliseconds collective_timeout;
  std::string requested_by;  // for messages: "worker:0"
  std::string job_token;     // reaches the host in its environment, never on its command line
  std::string job_id;        // the job's identity (DIST_JOB_ID in the host's environment)
  // An elastic job's store: it stays up while any member is, the chief included or not
  // (dist-store-host --elastic).
  bool elastic = false;
};

// Starts dist-store-host and returns once its store accepts connections. Throws
// CollectiveError naming the address if it cannot bind, fails, or does not answer within the
// rendezvous timeout plus kStoreHostStartAllowance (StopRequested once a stop signal is
// pending). The host then runs on its own until every member is gone.
void start_store_host(const StoreHostRequest& request);

}  // namespace dist::collective
