#include "collective/gloo_communicator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <signal.h>

#include <iostream>
#include <map>

#include "collective/store_host.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

using Clock = std::chrono::steady_clock;

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
  }
  DIST_INTERNAL_ASSERT(false, "unknown ReduceOp");
}

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

c10::intrusive_ptr<c10d::TCPStore> make_store(const HostPort& at, bool server,
                                              std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(at.port);
  options.isServer = server;
  options.waitWorkers = false;
  options.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(at.host, options);
}

// Gloo writes to its TCP sockets without MSG_NOSIGNAL: a write to a peer that just died
// raises SIGPIPE, whose default action kills this process (exit 141) before the failed write
// can be reported as "lost worker". Ignored unless the program installed its own handling.
void ignore_sigpipe_unless_handled() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
}

}  // namespace

GlooCommunicator::GlooCommunicator(const ClusterSpec& cluster, const TaskSpec& task,
                                   GlooOptions options)
    : cluster_(cluster), task_(task), options_(options), members_(cluster.collective_tasks()) {
  rank_ = cluster_.collective_rank(task_);
  ignore_sigpipe_unless_handled();
  connect_store();
  // Beat from now on: the store's host must see a member waiting for the others as alive.
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
  try {
    store_->set("joined/" + task_.name(), bytes("1"));
    wait_for_all("joined/", "joined");

    auto gloo = c10d::ProcessGroupGloo::Options::create(options_.collective_timeout);
    gloo->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(cluster_.address(task_).host));
    gloo->threads = 2;
    try {
      group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
          c10::make_intrusive<c10d::PrefixStore>("gloo", store_), rank_, size(), gloo);
    } catch (const std::exception& e) {
      fail_collective("connecting the Gloo process group", e);
    }
  } catch (...) {
    stop_heartbeat();  // a joinable std::thread member would terminate the process
    throw;
  }
}

GlooCommunicator::~GlooCommunicator() {
  stop_heartbeat();
  group_.reset();
  store_.reset();
}

void GlooCommunicator::stop_heartbeat() {
  stopping_ = true;
  if (heartbeat_.joinable()) heartbeat_.join();
}

std::string GlooCommunicator::member_name(int rank) const {
  const auto& member = members_.at(static_cast<size_t>(rank));
  return member.name() + " (" + cluster_.address(member).to_string() + ")";
}

void GlooCommunicator::connect_store() {
  const HostPort at = cluster_.store_address();
  if (rank_ == 0) {
    const StoreHostChoice host = locate_store_host();
    if (host.missing) std::cerr << missing_store_host_warning() << std::endl;
    if (host.binary.empty()) {
      hosts_store_ = true;
      try {
        store_ = make_store(at, /*server=*/true, options_.rendezvous_timeout);
      } catch (const std::exception& e) {
        throw CollectiveError(detail::concat("cannot host the rendezvous store at ", at.to_string(),
                                             " (", task_.name(), "): ", e.what(),
                                             "; is the port in use?"));
      }
      return;
    }
    std::vector<std::string> names;
    for (const auto& member : members_) names.push_back(member.name());
    start_store_host({host.binary, at, names, options_.rendezvous_timeout,
                      options_.collective_timeout, task_.name()});
  }
  // A store that already lists this task as joined, or that is closing, is not this job's: the
  // host of a previous job on the same address, which exits within seconds once its members
  // are gone (joining it would keep it alive with our heartbeat), or a second process was
  // started as this task. Leave it at once and try again until the rendezvous timeout.
  const auto wait = options_.rendezvous_timeout +
                    (rank_ == 0 ? std::chrono::milliseconds(0) : kStoreHostStartAllowance);
  const auto deadline = Clock::now() + wait;
  while (true) {
    try {
      store_ = make_store(at, /*server=*/false, wait);
    } catch (const std::exception& e) {
      if (rank_ == 0)
        throw CollectiveError(detail::concat("cannot reach the rendezvous store at ",
                                             at.to_string(), " that ", task_.name(),
                                             " just started: ", e.what()));
      throw CollectiveError(
          detail::concat(member_name(0), " never joined: its rendezvous store at ", at.to_string(),
                         " did not answer within ", wait.count() / 1000.0, " s (", e.what(), ")"));
    }
    const bool joined = store_->check({"joined/" + task_.name()});
    const bool closing = !joined && store_->check({"closing"});
    if (!joined && !closing) return;
    store_.reset();
    if (Clock::now() > deadline)
      throw CollectiveError(
          joined ? detail::concat("the rendezvous store at ", at.to_string(), " already lists ",
                                  task_.name(),
                                  " as joined: another job on these addresses is still running, "
                                  "or two processes were started as ",
                                  task_.name(), "; stop it or use other ports")
                 : detail::concat("the rendezvous store at ", at.to_string(),
                                  " is closing: its job ended before ", task_.name(),
                                  " connected; start every worker of a job together"));
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

void GlooCommunicator::wait_for_all(const std::string& prefix, const char* what) {
  const auto deadline = Clock::now() + options_.rendezvous_timeout;
  std::string missing;
  auto never = [&](const std::string& extra) {
    return CollectiveError(detail::concat(missing, " never ", what, " within ",
                                          options_.rendezvous_timeout.count() / 1000.0,
                                          " s (rendezvous timeout)", extra,
                                          "; is every worker started with the same TF_CONFIG "
                                          "cluster?"));
  };
  while (true) {
    std::string now_missing;
    try {
      for (int r = 0; r < size(); ++r) {
        if (!store_->check({prefix + members_[static_cast<size_t>(r)].name()}))
          now_missing += (now_missing.empty() ? "" : ", ") + member_name(r);
      }
    } catch (const std::exception& e) {
      // The store's host gave up first (its own rendezvous timeout): report what was missing.
      if (!missing.empty()) throw never(" and the rendezvous store closed");
      throw CollectiveError(
          detail::concat("lost the rendezvous store at ", cluster_.store_address().to_string(),
                         " (", member_name(0), ") while waiting for all workers: ", e.what()));
    }
    missing = now_missing;
    if (missing.empty()) return;
    if (Clock::now() > deadline) throw never("");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void GlooCommunicator::heartbeat_loop() {
  // Its own connection: the main connection may be blocked in a long wait.
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    store = make_store(cluster_.store_address(), false, options_.rendezvous_timeout);
  } catch (...) {
    return;  // the store is gone; collectives will report it
  }
  const std::string key = "alive/" + task_.name();
  while (!stopping_) {
    try {
      store->add(key, 1);
    } catch (...) {
      return;
    }
    for (int i = 0; i < 10 && !stopping_; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void GlooCommunicator::fail_collective(const char* what, const std::exception& error) {
  // Name the lost members. The first survivor to diagnose publishes a verdict in the store;
  // later ones (often blocked on a survivor that was busy diagnosing) reuse it. The diagnosis
  // itself: read every heartbeat twice, 1.5 s apart; members whose count did not move are lost.
  std::string lost;
  std::vector<int> alive;
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    store = make_store(cluster_.store_address(), false, std::chrono::seconds(3));
    if (store->check({"verdict"})) {
      lost = text(store->get("verdict"));
    } else {
      std::map<int, int64_t> first;
      for (int r = 0; r < size(); ++r)
        if (r != rank_)
          first[r] = store->add("alive/" + members_[static_cast<size_t>(r)].name(), 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      for (const auto& [r, beats] : first) {
        if (store->add("alive/" + members_[static_cast<size_t>(r)].name(), 0) == beats)
          lost += (lost.empty() ? "" : ", ") + member_name(r);
        else
          alive.push_back(r);
      }
      if (!lost.empty()) store->set("verdict", bytes(lost));
    }
    store->set("diagnosed/" + task_.name(), bytes("1"));
  } catch (...) {
    if (rank_ != 0) lost = member_name(0) + " (the rendezvous store at its address is unreachable)";
  }
  // Close this member's Gloo connections now: survivors blocked waiting on it fail at once
  // and come to read the verdict while the store is still up.
  group_.reset();
  if (hosts_store_ && store) {
    // This process hosts the store (no dist-store-host): keep it up until the surviving
    // members have read the verdict (bounded), or they would blame the store's host.
    const auto until = Clock::now() + std::chrono::seconds(5);
    for (int r : alive) {
      while (Clock::now() < until &&
             !store->check({"diagnosed/" + members_[static_cast<size_t>(r)].name()}))
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // And a moment more for them to close their store connections: LibTorch 1.13's TCPStore
    // client thread aborts its process when the server vanishes under it.
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  }
  if (!lost.empty())
    throw CollectiveError(detail::concat("lost worker: ", lost, " stopped responding during ", what,
                                         " (seen by ", member_name(rank_), "): ", error.what()));
  throw CollectiveError(
      detail::concat(what, " failed on ", member_name(rank_), ": ", error.what()));
}

void GlooCommunicator::check_usable(const char* what) const {
  DIST_CHECK(group_, CollectiveError, what, " on ", member_name(rank_),
             ": this communicator failed earlier (a worker was lost); recreate the strategy");
}

void GlooCommunicator::all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) {
  if (tensors.empty()) return;
  check_usable("all_reduce");
  c10d::AllreduceCoalescedOptions options;
  options.reduceOp = to_c10d(op);
  try {
    if (tensors.size() == 1) {
      group_->allreduce(tensors, options)->wait();
    } else {
      group_->allreduce_coalesced(tensors, options)->wait();
    }
  } catch (const std::exception& e) {
    fail_collective("all_reduce", e);
  }
  if (op == ReduceOp::kMean)
    for (auto& t : tensors) t.div_(size());
}

void GlooCommunicator::broadcast(std::vector<at::Tensor>& tensors, int root) {
  check_usable("broadcast");
  c10d::BroadcastOptions options;
  options.rootRank = root;
  try {
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t};
      group_->broadcast(one, options)->wait();
    }
  } catch (const std::exception& e) {
    fail_collective("broadcast", e);
  }
}

std::vector<at::Tensor> GlooCommunicator::all_gather(const at::Tensor& tensor) {
  check_usable("all_gather");
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < size(); ++r) outputs[0].push_back(at::empty_like(tensor));
  std::vector<at::Tensor> inputs{tensor.contiguous()};
  try {
    group_->allgather(outputs, inputs)->wait();
  } catch (const std::exception& e) {
    fail_collective("all_gather", e);
  }
  return outputs[0];
}

void GlooCommunicator::barrier() {
  check_usable("barrier");
  try {
    group_->barrier()->wait();
  } catch (const std::exception& e) {
    fail_collective("barrier", e);
  }
}

std::vector<std::string> GlooCommunicator::exchange(const std::string& key,
                                                    const std::string& value) {
  store_->set("exchange/" + key + "/" + task_.name(), bytes(value));
  wait_for_all("exchange/" + key + "/", "reached the start-up check");
  std::vector<std::string> values;
  for (const auto& member : members_)
    values.push_back(text(store_->get("exchange/" + key + "/" + member.name())));
  return values;
}

}  // namespace dist::collective
