// The process's connections to an etcd rendezvous (dist/collective/rendezvous_address.h): one
// EtcdClient per cluster, shared by every store over it (the rendezvous, the heartbeats and
// the liveness watch each have their own store, as with the built-in one, but gRPC multiplexes
// them over the same channels).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <c10/util/intrusive_ptr.h>

#include "collective/etcd/etcd_store.h"
#include "dist/collective/rendezvous_address.h"

namespace dist::collective::etcd {

// The client of the cluster `address` names, made on first use with etcd's TLS and user from
// DIST_ETCD_CA_FILE, DIST_ETCD_CERT_FILE, DIST_ETCD_KEY_FILE, DIST_ETCD_USER and
// DIST_ETCD_PASSWORD_FILE (InvalidArgument when a file cannot be read, or a user has no
// password file).
std::shared_ptr<EtcdClient> shared_etcd_client(const RendezvousAddress& address);

// A store of the job's keys under the address's prefix and `key_scope`.
c10::intrusive_ptr<EtcdStore> connect_to_etcd(const RendezvousAddress& address,
                                              std::chrono::milliseconds timeout,
                                              const std::string& key_scope = "");

}  // namespace dist::collective::etcd
