// RendezvousStore: the rendezvous store of one multi-worker job, served from a process of its
// own (dist-store-host, which the chief starts; users do not run it) until the job has ended,
// so that it outlives a crashed chief and the survivors can still read which worker was lost.
// The job has ended once every member is gone (left on purpose, or its heartbeat still for
// 3 s); the store then outlives it by about 1.3 s. A launcher that keeps a job's store on a
// machine of its own could serve it through this class. It does not depend on LibTorch.
//
// The exit rule in full, and why a process of its own: docs/design.md, "The rendezvous store"
// ("Store host").
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
