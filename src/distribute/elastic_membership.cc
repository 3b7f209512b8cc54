#include "distribute/elastic_membership.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "collective/store/store_client.h"
#include "dist/core/error.h"

namespace dist::detail {
namespace {

using Clock = std::chrono::steady_clock;
using collective::to_bytes;
using collective::to_text;

constexpr std::chrono::milliseconds kBeatEvery{500};  // as a generation's own heartbeat
constexpr std::chrono::milliseconds kPollEvery{20};

std::string prefix(int generation) { return "elastic/" + std::to_string(generation) + "/"; }

// Tells, for each member it is asked about, whether its heartbeat stopped.
class GoneWatch {
 public:
  explicit GoneWatch(collective::StoreClient& store) : store_(store) {}
  bool gone(const std::string& name) {
    const std::string key = "alive/" + name;
    const int64_t beats = store_.check({key}) ? store_.add(key, 0) : -1;
    auto [it, first] = seen_.try_emplace(name, Seen{beats, Clock::now()});
    if (!first && it->second.beats != beats) it->second = Seen{beats, Clock::now()};
    return Clock::now() - it->second.since > ElasticMembership::kGoneAfter;
  }

 private:
  struct Seen {
    int64_t beats;
    Clock::time_point since;
  };
  collective::StoreClient& store_;
  std::map<std::string, Seen> seen_;
};

}  // namespace

std::string join_names(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ",") + name;
  return text;
}

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> names;
  std::istringstream in(text);
  for (std::string name; std::getline(in, name, ',');)
    if (!name.empty()) names.push_back(name);
  return names;
}

ElasticMembership::ElasticMembership(const HostPort& store, const std::string& job_token,
                                     std::string self, std::chrono::milliseconds timeout)
    : self_(std::move(self)),
      job_token_(job_token),
      store_(c10::make_intrusive<collective::StoreClient>(store, timeout, job_token)),
      heartbeat_([this] { beat(); }) {}

ElasticMembership::~ElasticMembership() {
  stopping_ = true;
  heartbeat_.join();
}

// Its own connection: the agreement's calls on store_ must not wait behind a beat.
void ElasticMembership::beat() {
  c10::intrusive_ptr<collective::StoreClient> store;
  try {
    store = c10::make_intrusive<collective::StoreClient>(store_->address(), std::chrono::seconds(5),
                                                         job_token_);
  } catch (...) {
    return;  // the store is gone: the next agreement reports it
  }
  while (!stopping_) {
    try {
      store->add("alive/" + self_, 1);
    } catch (...) {
      return;
    }
    for (auto slept = std::chrono::milliseconds(0); slept < kBeatEvery && !stopping_;
         slept += std::chrono::milliseconds(50))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::vector<std::string> ElasticMembership::next_after_loss(
    int generation, const std::vector<std::string>& members,
    std::chrono::milliseconds wait_for_members) {
  const std::string at = prefix(generation);
  store_->set(at + "staying/" + self_, to_bytes("1"));
  GoneWatch watch(*store_);
  const auto give_up = Clock::now() + wait_for_members;
  while (!store_->check({at + "next"})) {
    std::vector<std::string> staying;
    bool undecided = false;
    for (const auto& name : members) {
      if (store_->check({at + "staying/" + name}))
        staying.push_back(name);
      else if (!watch.gone(name) && Clock::now() < give_up)
        undecided = true;
    }
    if (!undecided) {
      store_->compareSet(at + "next", {}, to_bytes(join_names(staying)));
      break;
    }
    std::this_thread::sleep_for(kPollEvery);
  }
  return split_names(to_text(store_->get(at + "next")));
}

}  // namespace dist::detail
