#include "collective/store_connection.h"

namespace dist::collective {

c10::intrusive_ptr<StoreClient> connect_to_store(const ProcessGroupSpec& spec,
                                                 std::chrono::milliseconds timeout) {
  return c10::make_intrusive<StoreClient>(spec.store_address, timeout, spec.job_token,
                                          store_key_scope(spec), spec.job_id);
}

}  // namespace dist::collective
