#include "distribute/cluster/elastic_membership.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "collective/etcd/etcd_claim.h"
#include "collective/heartbeat.h"
#include "collective/store/store_client.h"
#include "core/process_state.h"
#include "core/stop_request.h"
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
  explicit GoneWatch(collective::JobStore& store) : store_(store), beats_(store) {}
  bool gone(const std::string& name) {
    // A process of this machine that ended is gone at once; others when their beat stops.
    const std::string process = "elastic/process/" + name;
    if (store_.check({process}) && identified_process_ended(to_text(store_.get(process))))
      return true;
    return beats_.still_for(name) > ElasticMembership::kGoneAfter;
  }

 private:
  collective::JobStore& store_;
  collective::HeartbeatWatch beats_;
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

ElasticMembership::ElasticMembership(collective::JobStoreAddress store, std::string self,
                                     std::chrono::milliseconds timeout)
    : self_(std::move(self)),
      address_(std::move(store)),
      store_(collective::connect_to_job_store(address_, timeout)) {}

ElasticMembership::~ElasticMembership() {
  stopping_ = true;
  if (heartbeat_.joinable()) heartbeat_.join();
  if (!beaten_) return;
  try {
    collective::record_leave(*store_, self_);
  } catch (...) {  // the store is gone: nobody waits for this worker
  }
}

// The first beat is written before this returns: whoever looks at the job next (a joiner's
// find_job, which on etcd takes a job without beats for a dead one) sees this worker alive.
void ElasticMembership::start_heartbeat() {
  if (heartbeat_.joinable()) return;
  try {
    beat_into(*store_, /*connected=*/true);
  } catch (...) {  // the store is unreachable now: the thread tries again
  }
  heartbeat_ = std::thread([this] { beat(); });
}

// One beat; on a new connection, this process's identity first (who the beats belong to).
void ElasticMembership::beat_into(collective::JobStore& store, bool connected) {
  if (connected) store.set("elastic/process/" + self_, to_bytes(process_identity()));
  store.add("alive/" + self_, 1);
  beaten_ = true;
}

// Its own connection: the agreement's calls on store_ must not wait behind a beat. A failed
// beat connects again (a beat that stopped for good would make this worker look gone at the
// next resize); the thread ends only with the membership.
void ElasticMembership::beat() {
  c10::intrusive_ptr<collective::JobStore> store;
  while (!stopping_) {
    try {
      const bool connected = !store;
      if (connected) store = collective::connect_to_job_store(address_, std::chrono::seconds(5));
      beat_into(*store, connected);
    } catch (...) {
      store.reset();  // the store is unreachable now: try again at the next beat
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
    detail::throw_if_stop_requested("agreeing on the elastic job's next generation");
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

void ElasticMembership::mark_running(int generation, int size) {
  store_->set(prefix(generation) + "size", to_bytes(std::to_string(size)));
  store_->set("elastic/running", to_bytes("1"));
}

namespace {

// How the job ended (elastic/stopped, elastic/finished), for workers that come to join it. A
// store that is gone is no failure here: so is the job, and a worker that comes to join fails
// on the missing store and names it.
void record_end(collective::JobStore& store, const std::string& key, const std::string& how) {
  try {
    store.set(key, to_bytes(how));
  } catch (const CollectiveError&) {
  }
}

std::optional<std::string> read_end(collective::JobStore& store, const std::string& key) {
  if (!store.check({key})) return std::nullopt;
  return to_text(store.get(key));
}

}  // namespace

void ElasticMembership::mark_stopped(const std::string& why) {
  record_end(*store_, "elastic/stopped", why);
  record_end(*store_, collective::store::kClosingKey, "1");
}

std::optional<std::string> ElasticMembership::stopped() {
  return read_end(*store_, "elastic/stopped");
}

void ElasticMembership::mark_finished(const std::string& how) {
  record_end(*store_, "elastic/finished", how);
  record_end(*store_, collective::store::kClosingKey, "1");
}

std::optional<std::string> ElasticMembership::finished() {
  return read_end(*store_, "elastic/finished");
}

std::vector<int> ElasticMembership::sizes(int generation) {
  std::vector<int> sizes;
  for (int g = 0; g <= generation; ++g)
    if (store_->check({prefix(g) + "size"}))
      sizes.push_back(std::stoi(to_text(store_->get(prefix(g) + "size"))));
  return sizes;
}

namespace {

// Why a joiner with `theirs` may not join a job with `ours` ("flag=value" lines), or empty.
std::string settings_refusal(const std::string& ours, const std::string& theirs) {
  std::map<std::string, std::string> mine, other;
  auto read = [](const std::string& text, std::map<std::string, std::string>& into) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      const auto eq = line.find('=');
      if (eq != std::string::npos) into[line.substr(0, eq)] = line.substr(eq + 1);
    }
  };
  read(ours, mine);
  read(theirs, other);
  for (const auto& [flag, value] : mine) {
    const auto it = other.find(flag);
    const std::string given = it == other.end() ? "(none)" : it->second;
    if (given != value)
      return detail::concat("its ", flag, " is ", given, ", the running job's is ", value,
                            "; start it with the job's settings");
  }
  return {};
}

}  // namespace

ElasticMembership::Ticket ElasticMembership::read_ticket(int64_t n,
                                                         const std::vector<std::string>& members,
                                                         const std::string& settings) {
  Ticket ticket;
  const std::string key = "elastic/join/" + std::to_string(n);
  if (!store_->check({key})) {  // its joiner counted it but has not written it yet
    ticket.pending = true;
    return ticket;
  }
  std::istringstream text(to_text(store_->get(key)));
  std::string process;
  std::getline(text, ticket.name);
  std::getline(text, process);
  const std::string theirs((std::istreambuf_iterator<char>(text)),
                           std::istreambuf_iterator<char>());
  ticket.refusal = settings_refusal(settings, theirs);
  if (identified_process_ended(process))
    ticket.refusal = "its process ended before it was admitted";
  ticket.member = std::find(members.begin(), members.end(), ticket.name) != members.end();
  return ticket;
}

void ElasticMembership::answer(int64_t n, const std::string& text) {
  store_->set("elastic/admitted/" + std::to_string(n), to_bytes(text));
  store_->add("elastic/join-handled", 1);
}

// Joiners that may not join are answered at once: the group goes on undisturbed.
bool ElasticMembership::join_requested(const std::vector<std::string>& members,
                                       const std::string& settings) {
  while (true) {
    const int64_t handled = store_->add("elastic/join-handled", 0);
    if (store_->add("elastic/join-requests", 0) <= handled) return false;
    const Ticket ticket = read_ticket(handled + 1, members, settings);
    if (ticket.pending) return false;
    if (ticket.refusal.empty()) return !ticket.member;
    answer(handled + 1, "refused: " + ticket.refusal);
  }
}

std::vector<std::string> ElasticMembership::admit_joiners(int generation,
                                                          const std::vector<std::string>& members,
                                                          const std::string& settings) {
  std::vector<std::string> next = members;
  const int64_t requests = store_->add("elastic/join-requests", 0);
  const int64_t handled = store_->add("elastic/join-handled", 0);
  std::vector<std::pair<int64_t, std::string>> refusals;
  int64_t last = handled;  // tickets answered now: up to one that waits
  for (int64_t n = handled + 1; n <= requests; ++n, ++last) {
    const Ticket ticket = read_ticket(n, next, settings);
    if (ticket.pending) break;
    if (ticket.member && ticket.refusal.empty()) break;  // waits until its namesake is gone
    if (ticket.refusal.empty())
      next.push_back(ticket.name);
    else
      refusals.emplace_back(n, "refused: " + ticket.refusal);
  }
  const std::string decided =
      to_text(store_->compareSet(prefix(generation) + "next", {}, to_bytes(join_names(next))));
  for (int64_t n = handled + 1; n <= last; ++n) {
    auto refused =
        std::find_if(refusals.begin(), refusals.end(), [n](const auto& r) { return r.first == n; });
    answer(n, refused != refusals.end()
                  ? refused->second
                  : std::to_string(generation + 1) + " " + decided + " " + join_names(members));
  }
  return split_names(decided);
}

std::optional<std::vector<std::string>> ElasticMembership::next_members(int generation,
                                                                        const std::string& chief) {
  const std::string key = prefix(generation) + "next";
  GoneWatch watch(*store_);
  while (!store_->check({key})) {
    detail::throw_if_stop_requested("waiting for the chief to admit the joining workers");
    if (watch.gone(chief)) return std::nullopt;
    std::this_thread::sleep_for(kPollEvery);
  }
  return split_names(to_text(store_->get(key)));
}

ElasticMembership::FoundJob ElasticMembership::find_job(const collective::JobStoreAddress& store,
                                                        std::chrono::milliseconds timeout) {
  using State = FoundJob::State;
  auto only = [](State state) {
    FoundJob found;
    found.state = state;
    return found;
  };
  const bool etcd = store.rendezvous.is_etcd();
  if (!etcd && !collective::store_listening(store.store, timeout)) return {};  // starts now
  c10::intrusive_ptr<collective::JobStore> client;
  try {
    client = collective::connect_to_job_store(store, timeout);
  } catch (const collective::StoreOfAnotherJob&) {
    return only(State::kAnother);
  } catch (const CollectiveError&) {
    if (etcd) throw;  // etcd unreachable: nothing to start a job in either
    return {};        // no store yet, or it refused the token: the rendezvous says so
  }
  // On etcd the job that holds the prefix is named by its "job" key (etcd_claim.h).
  const std::string key_of_id = etcd ? collective::etcd::kJobKey : collective::store::kJobIdKey;
  if (etcd && !client->check({key_of_id})) return {};  // no job: it starts now
  // Another identity's job: the built-in store's client was refused above; etcd's says so here.
  if (etcd && to_text(client->get(key_of_id)) != store.job_id) return only(State::kAnother);
  FoundJob found;
  for (const char* key : {"elastic/stopped", "elastic/finished"}) {
    if (!client->check({key})) continue;
    found.state = State::kEnded;
    found.stopped = key == std::string("elastic/stopped");
    found.how = to_text(client->get(key));
    found.same_job = !store.job_id.empty() && client->check({key_of_id}) &&
                     to_text(client->get(key_of_id)) == store.job_id;
    return found;
  }
  // Closing without an end recorded: every worker of that job was lost or failed.
  if (client->check({collective::store::kClosingKey})) return only(State::kAnother);
  if (client->check({"elastic/running"})) {
    // On etcd nobody closes a job whose workers were all lost: its heartbeats' leases expired.
    if (etcd && !collective::etcd::anything_beats(store.rendezvous)) return only(State::kAnother);
    return only(State::kRunning);
  }
  return {};
}

void ElasticMembership::leave_before_forming(const collective::JobStoreAddress& store,
                                             const std::string& self) {
  if (store.rendezvous.is_etcd()) {
    try {  // within 2 s, a stop signal pending or not (etcd's calls look for none)
      collective::record_leave(*collective::connect_to_job_store(store, std::chrono::seconds(2)),
                               self);
    } catch (...) {
    }
    return;
  }
  collective::say_left(store.store, store.job_token, store.job_id, self, std::chrono::seconds(2));
}

int64_t ElasticMembership::ask_to_join(const std::string& settings) {
  // The ticket's text first: a chief that sees the counter move reads it at once.
  const int64_t ticket = store_->add("elastic/join-tickets", 1);
  store_->set("elastic/join/" + std::to_string(ticket),
              to_bytes(self_ + "\n" + process_identity() + "\n" + settings));
  store_->add("elastic/join-requests", 1);
  return ticket;
}

ElasticMembership::Admission ElasticMembership::await_admission(int64_t ticket,
                                                                std::chrono::milliseconds wait) {
  const std::string key = "elastic/admitted/" + std::to_string(ticket);
  const auto give_up = std::chrono::steady_clock::now() + wait;
  while (!store_->check({key}) && std::chrono::steady_clock::now() < give_up) {
    detail::throw_if_stop_requested("waiting to join the running elastic job");
    if (const auto why = stopped())
      throw CollectiveError(
          detail::concat("the elastic job stopped before it admitted ", self_, ": ", *why));
    if (auto done = finished()) {
      Admission none;
      none.finished = std::move(done);
      return none;
    }
    // Every worker of the job lost: the built-in store's host closes it; on etcd no member's
    // heartbeat is left (this joiner beats only once admitted), or a new job took the prefix
    // over already, erasing this ticket with the rest (etcd_claim.h).
    if (store_->check({collective::store::kClosingKey}) ||
        (address_.rendezvous.is_etcd() &&
         (!collective::etcd::anything_beats(address_.rendezvous) ||
          !store_->check({"elastic/join/" + std::to_string(ticket)})))) {
      Admission none;
      none.job_gone = true;
      return none;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!store_->check({key})) {
    throw CollectiveError(detail::concat(
        self_, " asked to join the running job but no step boundary answered within ",
        wait.count() / 1000.0,
        " s (--rendezvous-timeout); is the job still training, and is no other process running "
        "as ",
        self_, "?"));
  }
  const std::string answer = to_text(store_->get(key));
  DIST_CHECK_ARG(answer.rfind("refused: ", 0) != 0, "the running job refused ", self_, ": ",
                 answer.substr(9));
  std::istringstream words(answer);
  std::string generation, members, previous;
  words >> generation >> members >> previous;
  Admission admission{std::stoi(generation), split_names(members), split_names(previous),
                      std::nullopt};
  DIST_CHECK(std::find(admission.members.begin(), admission.members.end(), self_) !=
                 admission.members.end(),
             CollectiveError, "the running job lost a worker while admitting ", self_,
             " and went on without it; start ", self_, " again");
  return admission;
}

}  // namespace dist::detail
