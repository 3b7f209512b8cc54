// RendezvousAddress: where a job's workers meet and keep their shared state (members,
// heartbeats, generations, agreements). Either the built-in store, which the first worker (or
// dist-launch) hosts at the chief's address, or an etcd cluster the user runs, under a key prefix
// of the job's own: then no worker's process holds anything of the job, and an elastic job
// survives the loss of any worker and of any etcd member short of a quorum (docs/elastic.md,
// "Which rendezvous").
#pragma once

#include <string>
#include <vector>

#include "dist/core/host_port.h"

namespace dist {

struct RendezvousAddress {
  // The etcd cluster's client addresses (at least one; every member of it is best, so that any
  // one may be lost); empty: the built-in store.
  std::vector<HostPort> etcd_members;
  // Where the job's keys live in etcd: starts and ends with '/' ("/dist/train-42/").
  std::string etcd_prefix;

  bool is_etcd() const { return !etcd_members.empty(); }
  // "etcd://h1:2379,h2:2379/dist/train-42/", or "the built-in store".
  std::string to_string() const;
};

// "" (the built-in store) or "etcd://host:port[,host:port...]/prefix" (the prefix's leading and
// trailing '/' may be left out; it may not be empty, "/" alone, or hold "//"). InvalidArgument
// names `source` and says what is wrong and the form to use.
RendezvousAddress parse_rendezvous_address(const std::string& text,
                                           const std::string& source = "--rendezvous");

// DIST_RENDEZVOUS from the process's environment, parsed; unset or empty: the built-in store.
// etcd's own TLS and users come from DIST_ETCD_CA_FILE, DIST_ETCD_CERT_FILE, DIST_ETCD_KEY_FILE,
// DIST_ETCD_USER and DIST_ETCD_PASSWORD_FILE (docs/elastic.md).
RendezvousAddress rendezvous_address_from_environment();

// `text` parsed as parse_rendezvous_address does when it is not empty, else
// rendezvous_address_from_environment(): what a job's options choose, with the environment as
// the default.
RendezvousAddress rendezvous_address_or_environment(const std::string& text,
                                                    const std::string& source);

}  // namespace dist
