#include "dist/collective/rendezvous_store.h"

#include <algorithm>
#include <map>
#include <thread>

#include "collective/store/member_list.h"
#include "collective/store/store_server.h"
#include "dist/core/error.h"

namespace dist {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kMemberStaleAfter{3000};  // 6 missed heartbeats
constexpr milliseconds kMemberPollEvery{250};    // well under the heartbeat period of 500 ms
constexpr milliseconds kProbeLeaveGrace{1000};   // for probing clients to disconnect
constexpr milliseconds kBindRetryFor{10000};     // > a previous host's linger after its job ends
// The keys each member's Heartbeat writes (StoreClient::kProcessKeyPrefix, kLeftKeyPrefix;
// that header needs LibTorch, which this file must not).
constexpr char kAlivePrefix[] = "alive/";
constexpr char kLeftPrefix[] = "left/";

// Binds, retrying while the previous job's store may still hold the port.
std::unique_ptr<collective::StoreServer> bind_store(const RendezvousStoreOptions& options) {
  const auto give_up = Clock::now() + std::min(kBindRetryFor, options.rendezvous_timeout);
  while (true) {
    try {
      return std::make_unique<collective::StoreServer>(options.address, options.job_token,
                                                       options.job_id);
    } catch (const std::exception& e) {
      if (Clock::now() > give_up) throw Error(e.what());
    }
    std::this_thread::sleep_for(milliseconds(200));
  }
}

struct WatchedMember {
  bool seen = false;
  int64_t beats = 0;
  Clock::time_point moved;
};

// Reads member `name`'s counter and whether it left (the header's rule).
bool member_gone(collective::StoreServer& store, const std::string& name, WatchedMember& m,
                 Clock::time_point now) {
  const std::string key = kAlivePrefix + name;
  if (!store.check(key)) return false;  // add(key, 0) would create a missing key
  int64_t beats = m.beats;
  try {
    beats = store.add(key, 0);
  } catch (const std::exception&) {  // not a number (no member of ours writes one): unmoved
  }
  if (!m.seen || beats != m.beats) m.moved = now;
  m.seen = true;
  m.beats = beats;
  const std::string left = kLeftPrefix + name;
  try {
    if (store.check(left) && store.add(left, 0) >= beats) return true;
  } catch (const std::exception&) {  // not a number: no leave of ours; its beat decides
  }
  return now - m.moved > kMemberStaleAfter;
}

}  // namespace

struct RendezvousStore::Impl {
  RendezvousStoreOptions options;
  std::unique_ptr<collective::StoreServer> server;
};

RendezvousStore::RendezvousStore(RendezvousStoreOptions options) : impl_(std::make_unique<Impl>()) {
  DIST_CHECK_ARG(!options.members.empty(), "a rendezvous store needs the job's members");
  impl_->server = bind_store(options);
  impl_->options = std::move(options);
}

RendezvousStore::~RendezvousStore() = default;

int RendezvousStore::serve_until_job_ends() {
  collective::StoreServer& store = *impl_->server;
  const RendezvousStoreOptions& options = impl_->options;
  const auto start = Clock::now();
  const auto backstop =
      options.rendezvous_timeout + options.collective_timeout + milliseconds(10000);
  std::map<std::string, WatchedMember> members;
  bool chief_gone = false;
  Clock::time_point chief_gone_since = start;
  while (true) {
    const auto now = Clock::now();
    bool seen_all_gone = true;
    bool any_seen = false;
    bool chief_now_gone = false;
    for (const auto& name : options.members) {
      WatchedMember& m = members[name];
      const bool gone = member_gone(store, name, m, now);
      if (m.seen) {
        any_seen = true;
        seen_all_gone = seen_all_gone && gone;
      }
      if (name == options.members.front())
        chief_now_gone = m.seen ? gone : now - start > options.rendezvous_timeout;
    }
    if (chief_now_gone && !chief_gone) chief_gone_since = now;
    chief_gone = chief_now_gone;
    if (any_seen ? seen_all_gone : now - start > options.rendezvous_timeout) {
      store.set(collective::store::kClosingKey, "1");
      std::this_thread::sleep_for(kProbeLeaveGrace);
      return 0;
    }
    if (chief_gone && now - chief_gone_since > backstop && !options.elastic) return 2;
    std::this_thread::sleep_for(kMemberPollEvery);
  }
}

std::vector<std::string> RendezvousStore::parse_members(const std::string& text) {
  return collective::expand_member_list(text);
}

}  // namespace dist
