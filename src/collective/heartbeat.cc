#include "collective/heartbeat.h"

#include <chrono>
#include <iostream>
#include <sstream>

#include "collective/store/job_store.h"
#include "collective/store_connection.h"

namespace dist::collective {

std::chrono::steady_clock::duration HeartbeatWatch::still_for(const std::string& name) {
  const std::string key = "alive/" + name;
  const int64_t beats = store_.check({key}) ? store_.add(key, 0) : -1;
  const auto now = std::chrono::steady_clock::now();
  auto [it, first] = seen_.try_emplace(name, Seen{beats, now});
  if (!first && it->second.beats != beats) it->second = Seen{beats, now};
  return now - it->second.since;
}

Heartbeat::Heartbeat(const ProcessGroupSpec& spec, const std::atomic<int64_t>& issued)
    : spec_(spec), issued_(issued), thread_([this] { loop(); }) {}

void Heartbeat::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

// How long one beat may take. The store's host counts a member whose beat has not moved for
// 3 s as gone (dist/collective/rendezvous_store.h), so a slower beat is lost anyway; and stop()
// joins the thread, so a beat to a store that has become unreachable (its host's link down: no
// reset, the packets vanish) must not hold the member's exit for the rendezvous timeout.
namespace {
constexpr std::chrono::seconds kBeatTimeout{5};
}  // namespace

void Heartbeat::loop() {
  c10::intrusive_ptr<JobStore> store;
  try {
    store = connect_to_store(spec_, spec_.rendezvous_timeout);
    store->setTimeout(kBeatTimeout);
  } catch (...) {
    return;  // the store is gone; collectives will report it
  }
  const std::string& self = spec_.members[static_cast<size_t>(spec_.rank)].name;
  int64_t refusals_shown = 0;
  auto show_refusals = [&] {
    // Only the built-in store logs whom it turned away; etcd keeps its own logs.
    if (spec_.rank == 0 && !spec_.rendezvous.is_etcd() && store->check({store::kRefusalLogKey}))
      refusals_shown = print_refusals(to_text(store->get(store::kRefusalLogKey)), refusals_shown);
  };
  for (int64_t beat = 0; !stopping_; ++beat) {
    try {
      store->add(JobStore::kProcessKeyPrefix + self, 1);
      store->set("issued/" + self, to_bytes(std::to_string(issued_.load())));
      if (beat % 4 == 0) show_refusals();
    } catch (...) {
      return;
    }
    for (int i = 0; i < 10 && !stopping_; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  try {
    show_refusals();
    // Leaving on purpose: the store's host need not wait for this beat to go stale before it
    // closes (dist/collective/rendezvous_store.h). An elastic job's worker leaves once, when its
    // process ends (ElasticMembership), not with each generation's communicator.
    if (!spec_.elastic_generation) record_leave(*store, self);
  } catch (...) {
  }
}

int64_t Heartbeat::print_refusals(const std::string& log, int64_t shown) const {
  const std::string at = spec_.store_address.to_string();
  std::istringstream lines(log);
  int64_t last = shown;
  int64_t skipped = 0;
  for (std::string line; std::getline(lines, line);) {
    const size_t space = line.find(' ');
    int64_t number = 0;
    try {
      number = std::stoll(line.substr(0, space));
    } catch (const std::exception&) {
      continue;
    }
    if (number <= shown) continue;
    if (last == shown && number > shown + 1) skipped = number - shown - 1;
    if (skipped > 0) {
      std::cerr << "rendezvous store at " << at << ": refused " << skipped << " more connection(s)"
                << std::endl;
      skipped = 0;
    }
    std::cerr << "rendezvous store at " << at << ": refused " << line.substr(space + 1)
              << std::endl;
    last = number;
  }
  return last;
}

}  // namespace dist::collective
