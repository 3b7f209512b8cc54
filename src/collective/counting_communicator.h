// A communicator that counts what it is handed and what its algorithms send
// (dist/collective/communication_counters.h), around another one it forwards everything to.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "collective/communicator.h"
#include "dist/collective/communication_counters.h"

namespace dist::collective {

struct ByteCounters {
  std::atomic<int64_t> collectives{0};
  std::atomic<int64_t> payload_bytes{0};
  std::atomic<int64_t> bytes_sent{0};
  CommunicationCounters snapshot() const {
    return {collectives.load(), payload_bytes.load(), bytes_sent.load()};
  }
};

// `inner`, counting into `counters` (shared: it outlives the communicator if the caller keeps it).
std::unique_ptr<Communicator> count_bytes(std::unique_ptr<Communicator> inner,
                                          std::shared_ptr<ByteCounters> counters);

}  // namespace dist::collective
