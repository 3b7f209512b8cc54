#include "collective/store_connection.h"

#include "collective/etcd/etcd_connection.h"
#include "collective/store/store_client.h"

namespace dist::collective {

c10::intrusive_ptr<JobStore> connect_to_job_store(const JobStoreAddress& address,
                                                  std::chrono::milliseconds timeout,
                                                  const std::string& key_scope,
                                                  bool stop_on_signal) {
  if (address.rendezvous.is_etcd())
    return etcd::connect_to_etcd(address.rendezvous, timeout, key_scope);
  return c10::make_intrusive<StoreClient>(address.store, timeout, address.job_token, key_scope,
                                          address.job_id, stop_on_signal);
}

JobStoreAddress job_store_address(const ProcessGroupSpec& spec) {
  return {spec.store_address, spec.rendezvous, spec.job_token, spec.job_id};
}

c10::intrusive_ptr<JobStore> connect_to_store(const ProcessGroupSpec& spec,
                                              std::chrono::milliseconds timeout) {
  return connect_to_job_store(job_store_address(spec), timeout, store_key_scope(spec));
}

}  // namespace dist::collective
