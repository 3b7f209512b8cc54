#include "collective/etcd/etcd_store.h"

#include <algorithm>

#include "core/stop_request.h"
#include "dist/core/error.h"

namespace dist::collective::etcd {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string text_of(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }
std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

// A wait looks for a stop signal at least this often.
constexpr milliseconds kWaitSlice{1000};

}  // namespace

EtcdStore::EtcdStore(std::shared_ptr<EtcdClient> client, std::string prefix, milliseconds timeout,
                     std::string key_scope)
    : JobStore(timeout),
      client_(std::move(client)),
      prefix_(std::move(prefix)),
      key_scope_(std::move(key_scope)) {
  DIST_CHECK_ARG(!prefix_.empty() && prefix_.back() == '/', "the etcd key prefix '", prefix_,
                 "' must end in '/' (keys are the prefix and a name)");
}

EtcdStore::~EtcdStore() {
  if (lease_ == 0) return;
  try {
    client_->revoke_lease(lease_);
  } catch (const std::exception&) {  // etcd unreachable: the lease expires by itself
  }
}

std::string EtcdStore::where() const {
  return "the etcd rendezvous at etcd://" + client_->members_text() + prefix_;
}

int64_t EtcdStore::heartbeat_lease() {
  std::lock_guard<std::mutex> lock(lease_mutex_);
  const auto now = Clock::now();
  if (lease_ != 0 && now - lease_renewed_ < kHeartbeatLease / 3) return lease_;
  if (lease_ == 0 || !client_->keep_alive(lease_)) lease_ = client_->grant_lease(kHeartbeatLease);
  lease_renewed_ = now;
  return lease_;
}

void EtcdStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  client_->put(full_key(key), text_of(value));
}

std::vector<uint8_t> EtcdStore::compareSet(const std::string& key,
                                           const std::vector<uint8_t>& expected,
                                           const std::vector<uint8_t>& desired) {
  const std::optional<std::string> expectation =
      expected.empty() ? std::nullopt : std::optional<std::string>(text_of(expected));
  const EtcdClient::Swap swap =
      client_->compare_and_set(full_key(key), expectation, text_of(desired));
  if (swap.swapped) return desired;
  return swap.value ? bytes_of(*swap.value) : expected;
}

std::vector<uint8_t> EtcdStore::get(const std::string& key) {
  wait({key}, timeout_);
  const auto value = client_->get(full_key(key));
  if (!value)  // deleted between the wait and the read
    throw CollectiveError("the key '" + key + "' went from the etcd rendezvous at " +
                          client_->members_text() + " as it was read");
  return bytes_of(value->value);
}

int64_t EtcdStore::add(const std::string& key, int64_t value) {
  if (value == 0) {
    const auto now = client_->get(full_key(key));
    if (!now) return 0;  // a write would leave a counter of a vanished process without a lease
    size_t used = 0;
    try {
      const int64_t number = std::stoll(now->value, &used);
      if (used == now->value.size()) return number;
    } catch (const std::logic_error&) {
    }
    throw CollectiveError("the key '" + key + "' in " + where() + " holds '" + now->value +
                          "', not a counter; another program wrote under the job's prefix");
  }
  const bool heartbeat = key.rfind(kProcessKeyPrefix, 0) == 0 && value != 0;
  return client_->add(full_key(key), value, heartbeat ? heartbeat_lease() : 0);
}

bool EtcdStore::deleteKey(const std::string& key) { return client_->erase(full_key(key)); }

bool EtcdStore::check(const std::vector<std::string>& keys) {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& key) {
    return client_->get(full_key(key)).has_value();
  });
}

int64_t EtcdStore::getNumKeys() {
  return static_cast<int64_t>(client_->get_prefix(prefix_).size());
}

void EtcdStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void EtcdStore::wait(const std::vector<std::string>& keys, const milliseconds& requested) {
  // c10d's kNoTimeout (0) means "forever"; here every wait is bounded by the store's timeout.
  const milliseconds timeout = requested.count() > 0 ? requested : timeout_;
  const auto deadline = Clock::now() + timeout;
  for (const std::string& key : keys) {
    for (;;) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (client_->wait_for(full_key(key), std::clamp(left, milliseconds(0), kWaitSlice))) break;
      if (Clock::now() >= deadline) {
        std::string names;
        for (const auto& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
        throw CollectiveError(detail::concat("timed out after ", timeout.count() / 1000.0,
                                             " s waiting for ", names, " in ", where()));
      }
      detail::throw_if_stop_requested("waiting for the other workers in the etcd rendezvous");
    }
  }
}

}  // namespace dist::collective::etcd
