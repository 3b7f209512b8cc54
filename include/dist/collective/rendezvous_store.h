// RendezvousStore: the rendezvous store of one multi-worker job, served from a process of its
// own until the job has ended, so that it outlives a crashed chief. With the store inside the
// chief, kill -9 of the chief takes the store with it, and the survivors can only say that the
// store vanished, not which worker was lost (the verdict lives in the store); served from
// elsewhere, it stays up until the survivors have diagnosed and exited.
//
// dist-store-host is the process that serves it: the chief (collective rank 0) starts that
// process, and users do not run it by hand. A launcher that keeps a job's store on a machine of
// its own could serve it in its own process through this class.
//
// When the job has ended: the store reads every member's heartbeat counter (bumped twice a
// second by each member) four times a second. A member is gone once it left on purpose (it
// recorded its counter's value when its process ended, and the counter has not moved since: a
// worker that finished or failed with an error), or its counter has not moved for 3 s (a killed
// worker). A member that never connected is gone once every member that did is gone (nobody is
// left to wait for it), or, when none ever did, once the rendezvous timeout has passed since
// serving began. Once every member is gone the store marks itself closing (a member of a next
// job on this address that probes it then leaves at once), waits 1 s for such probes to leave,
// and the job has ended. So a store outlives its job by its own clean shutdown, about 1.3 s, or
// 3 s more after the last member was killed. As a backstop, it gives up once the chief (the
// first member) has been gone for rendezvous + collective timeout + 10 s, the longest the
// survivors can take to fail and exit; not in an elastic job, whose survivors go on without the
// chief.
//
// It does not depend on LibTorch: dist-store-host compiles it in without the rest of the
// library.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dist/core/host_port.h"

namespace dist {

struct RendezvousStoreOptions {
  // The address the members connect to. Exactly this address is bound, never the wildcard.
  HostPort address;
  // The members' task names in collective rank order ("chief:0", "worker:0", ...); the first is
  // the chief, whose absence starts the backstop. Empty: InvalidArgument.
  std::vector<std::string> members;
  // How long the members wait for each other to join (CommunicationOptions::rendezvous_timeout).
  std::chrono::milliseconds rendezvous_timeout{120000};
  // How long a collective may take (CommunicationOptions::timeout).
  std::chrono::milliseconds collective_timeout{300000};
  // An elastic job: the store stays up while any member is, with no backstop.
  bool elastic = false;
  // What every member must present before it can read or write (SECURITY.md); empty: a job
  // without a token.
  std::string job_token;
  // The job's identity (job_id_from_environment, cluster_resolver.h): a member of another job
  // is sent away. Empty: any.
  std::string job_id;
};

class RendezvousStore {
 public:
  // Binds options.address and starts serving on a thread of its own. The previous job's store
  // may still hold the port for a moment: binding is retried for up to 10 s (or the rendezvous
  // timeout, if shorter). Throws Error saying why it could not bind (port in use, unknown host).
  explicit RendezvousStore(RendezvousStoreOptions options);
  // Stops serving and closes every connection.
  ~RendezvousStore();
  RendezvousStore(const RendezvousStore&) = delete;
  RendezvousStore& operator=(const RendezvousStore&) = delete;

  // Blocks until the job has ended, by the rules of the top comment. Returns 0 when every
  // member is gone, 2 when the backstop gave up on the job. Call it from one thread, once.
  int serve_until_job_ends();

  // The members as the chief writes them on dist-store-host's command line: task names in rank
  // order, separated by commas, with a run of one task type's consecutive indices written as a
  // range ("chief:0,worker:0-19999"), so that the command line of a 20,000-task job stays a few
  // bytes long. Throws InvalidArgument for a range that runs backwards or names more than 10
  // million tasks. An empty string gives no member.
  static std::vector<std::string> parse_members(const std::string& text);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dist
