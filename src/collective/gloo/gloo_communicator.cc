#include "collective/gloo/gloo_communicator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <signal.h>

#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>

#include "collective/gloo/store_host.h"
#include "collective/store/store_client.h"
#include "collective/store/store_server.h"
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

c10::intrusive_ptr<StoreClient> connect_to(const HostPort& at, std::chrono::milliseconds timeout,
                                           const std::string& job_token) {
  return c10::make_intrusive<StoreClient>(at, timeout, job_token);
}

// Gloo writes to its TCP sockets without MSG_NOSIGNAL: a write to a peer that just died
// raises SIGPIPE, whose default action kills this process (exit 141) before the failed write
// can be reported as "lost worker". Ignored unless the program installed its own handling.
void ignore_sigpipe_unless_handled() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
}

std::terminate_handler previous_terminate = nullptr;

// Backstop for errors raised on Gloo's own threads, where nothing can catch them (with
// check_collectives they should not happen): a named message and exit code 1, the documented
// code for a failure while training, instead of "terminate called ..." and SIGABRT. Anything
// else goes to the handler that was there before.
[[noreturn]] void on_uncaught_exception() {
  std::string what;
  if (auto error = std::current_exception()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
  }
  // Gloo's errors carry their source path ("[./gloo/transport/tcp/pair.cc:598] ...").
  if (what.find("gloo/") == std::string::npos) {
    if (previous_terminate != nullptr) previous_terminate();
    std::abort();
  }
  std::cerr << "distribute: fatal: Gloo failed on its own thread: " << what
            << "\n(the workers sent messages that do not match: they issued different "
               "collectives; start every worker with the same settings and the same program)"
            << std::endl;
  std::_Exit(1);
}

void install_terminate_backstop() {
  static std::once_flag once;
  std::call_once(once, [] { previous_terminate = std::set_terminate(on_uncaught_exception); });
}

}  // namespace

GlooCommunicator::GlooCommunicator(ProcessGroupSpec options) : options_(std::move(options)) {
  DIST_CHECK_ARG(!options_.members.empty(), "a Gloo group needs at least one member");
  DIST_CHECK_ARG(options_.rank >= 0 && options_.rank < size(), "Gloo rank ", options_.rank,
                 " is outside 0..", size() - 1);
  ignore_sigpipe_unless_handled();
  install_terminate_backstop();
  connect_store();
  // Beat from now on: the store's host must see a member waiting for the others as alive.
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
  try {
    store_->set("joined/" + self().name, bytes("1"));
    wait_for_all("joined/", "joined");

    auto gloo = c10d::ProcessGroupGloo::Options::create(options_.collective_timeout);
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(self().address.host));
    gloo->threads = 2;
    try {
      group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
          c10::make_intrusive<c10d::PrefixStore>("gloo", store_), rank(), size(), gloo);
    } catch (const std::exception& e) {
      fail_collective("connecting the Gloo process group", 0, e);
    }
  } catch (...) {
    stop_heartbeat();  // a joinable std::thread member would terminate the process
    throw;
  }
}

GlooCommunicator::~GlooCommunicator() {
  // Destroyed while an exception unwinds: this member is failing. Say so, unless the failure is
  // a collective's that the others already see.
  if (std::uncaught_exceptions() > 0 && !failed_)
    abort("it stopped with an error (its own output says which)");
  stop_heartbeat();
  group_.reset();
  store_.reset();
  server_.reset();
}

void GlooCommunicator::stop_heartbeat() {
  stopping_ = true;
  if (heartbeat_.joinable()) heartbeat_.join();
}

std::string GlooCommunicator::member_name(int rank) const {
  const auto& member = options_.members.at(static_cast<size_t>(rank));
  return member.name + " (" + member.address.to_string() + ")";
}

void GlooCommunicator::connect_store() {
  const HostPort at = options_.store_address;
  if (rank() == 0) {
    if (options_.job_token.empty())
      std::cerr << "warning: this job has no job token (DIST_JOB_TOKEN or DIST_JOB_TOKEN_FILE; "
                   "dist-launch makes one), so any process that can reach "
                << at.to_string() << " can join its rendezvous; see SECURITY.md" << std::endl;
    StoreHostChoice host;
    if (!options_.store_in_process) {
      host = locate_store_host();
      if (host.missing) std::cerr << missing_store_host_warning() << std::endl;
    }
    if (host.binary.empty()) {
      try {
        server_ = std::make_unique<StoreServer>(at, options_.job_token);
      } catch (const std::exception& e) {
        throw CollectiveError(detail::concat("cannot host the rendezvous store at ", at.to_string(),
                                             " (", self().name, "): ", e.what(),
                                             "; is the port in use?"));
      }
    } else {
      std::vector<std::string> names;
      for (const auto& member : options_.members) names.push_back(member.name);
      start_store_host({host.binary, at, names, options_.rendezvous_timeout,
                        options_.collective_timeout, self().name, options_.job_token});
    }
  }
  // A store that already lists this task as joined, or that is closing, is not this job's: the
  // host of a previous job on the same address, which exits within seconds once its members
  // are gone (joining it would keep it alive with our heartbeat), or a second process was
  // started as this task. Leave it at once and try again until the rendezvous timeout.
  const auto wait = options_.rendezvous_timeout +
                    (rank() == 0 ? std::chrono::milliseconds(0) : kStoreHostStartAllowance);
  const auto deadline = Clock::now() + wait;
  while (true) {
    try {
      store_ = connect_to(at, wait, options_.job_token);
    } catch (const std::exception& e) {
      if (rank() == 0)
        throw CollectiveError(detail::concat("cannot reach the rendezvous store at ",
                                             at.to_string(), " that ", self().name,
                                             " just started: ", e.what()));
      throw CollectiveError(
          detail::concat(member_name(0), " never joined: its rendezvous store at ", at.to_string(),
                         " did not answer within ", wait.count() / 1000.0, " s (", e.what(), ")"));
    }
    const bool joined = store_->check({"joined/" + self().name});
    const bool closing = !joined && store_->check({"closing"});
    if (!joined && !closing) return;
    store_.reset();
    if (Clock::now() > deadline)
      throw CollectiveError(
          joined ? detail::concat("the rendezvous store at ", at.to_string(), " already lists ",
                                  self().name,
                                  " as joined: another job on these addresses is still running, "
                                  "or two processes were started as ",
                                  self().name, "; stop it or use other ports")
                 : detail::concat("the rendezvous store at ", at.to_string(),
                                  " is closing: its job ended before ", self().name,
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
    std::string failures;
    try {
      failures = failure_reports(*store_);
      for (int r = 0; r < size(); ++r) {
        if (!store_->check({prefix + options_.members[static_cast<size_t>(r)].name}))
          now_missing += (now_missing.empty() ? "" : ", ") + member_name(r);
      }
    } catch (const std::exception& e) {
      // The store's host gave up first (its own rendezvous timeout): report what was missing.
      if (!missing.empty()) throw never(" and the rendezvous store closed");
      throw CollectiveError(detail::concat("lost the rendezvous store at ",
                                           options_.store_address.to_string(), " (", member_name(0),
                                           ") while waiting for all workers: ", e.what()));
    }
    // Everyone arrived: a member's failure after it published its key is not this wait's to
    // report (the caller's own check, say of the models, names the real cause).
    if (now_missing.empty()) return;
    if (!failures.empty()) {
      failed_ = true;
      throw CollectiveError(detail::concat(failures, "; ", member_name(rank()),
                                           " stops too (it was waiting until every worker ", what,
                                           ")"));
    }
    missing = now_missing;
    if (missing.empty()) return;
    if (Clock::now() > deadline) throw never("");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int64_t GlooCommunicator::print_refusals(const std::string& log, int64_t shown) const {
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
      std::cerr << "rendezvous store at " << options_.store_address.to_string() << ": refused "
                << skipped << " more connection(s)" << std::endl;
      skipped = 0;
    }
    std::cerr << "rendezvous store at " << options_.store_address.to_string() << ": refused "
              << line.substr(space + 1) << std::endl;
    last = number;
  }
  return last;
}

void GlooCommunicator::heartbeat_loop() {
  // Its own connection: the main connection may be blocked in a long wait.
  c10::intrusive_ptr<StoreClient> store;
  try {
    store = connect_to(options_.store_address, options_.rendezvous_timeout, options_.job_token);
  } catch (...) {
    return;  // the store is gone; collectives will report it
  }
  const std::string key = "alive/" + self().name;
  // Rank 0 tells its user whom the store turned away: every 2 s, and once at the end.
  int64_t refusals_shown = 0;
  auto show_refusals = [&] {
    if (rank() == 0 && store->check({store::kRefusalLogKey}))
      refusals_shown = print_refusals(text(store->get(store::kRefusalLogKey)), refusals_shown);
  };
  for (int64_t beat = 0; !stopping_; ++beat) {
    try {
      store->add(key, 1);
      store->set("issued/" + self().name, bytes(std::to_string(issued_.load())));
      if (beat % 4 == 0) show_refusals();
    } catch (...) {
      return;
    }
    for (int i = 0; i < 10 && !stopping_; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  try {
    show_refusals();
  } catch (...) {
  }
}

void GlooCommunicator::fail_collective(const std::string& what, int64_t sequence,
                                       const std::exception& error) {
  // Another call already diagnosed this communicator's failure (several packs in flight).
  DIST_CHECK(!failed_.exchange(true), CollectiveError, what, " on ", member_name(rank()),
             ": this communicator failed earlier (a worker was lost); recreate the strategy");
  // Name the lost members. The first survivor to diagnose publishes a verdict in the store;
  // later ones (often blocked on a survivor that was busy diagnosing) reuse it. The diagnosis
  // itself: read every heartbeat twice, 1.5 s apart; members whose count did not move are lost.
  std::string lost;
  std::string behind;  // live members that never issued this collective
  std::vector<int> alive;
  std::string failures;  // members that failed on their own (abort) and published why
  c10::intrusive_ptr<StoreClient> store;
  try {
    store = connect_to(options_.store_address, std::chrono::seconds(3), options_.job_token);
    failures = failure_reports(*store);
    if (!failures.empty()) {
      // That is the whole story.
    } else if (store->check({"verdict"})) {
      lost = text(store->get("verdict"));
    } else {
      std::map<int, int64_t> first;
      for (int r = 0; r < size(); ++r)
        if (r != rank())
          first[r] = store->add("alive/" + options_.members[static_cast<size_t>(r)].name, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      for (const auto& [r, beats] : first) {
        if (store->add("alive/" + options_.members[static_cast<size_t>(r)].name, 0) == beats)
          lost += (lost.empty() ? "" : ", ") + member_name(r);
        else
          alive.push_back(r);
      }
      if (!lost.empty()) store->set("verdict", bytes(lost));
    }
    if (lost.empty() && sequence > 0) {
      for (int r = 0; r < size(); ++r) {
        const std::string key = "issued/" + options_.members[static_cast<size_t>(r)].name;
        if (r == rank() || !store->check({key})) continue;
        const int64_t theirs = std::stoll(text(store->get(key)));
        if (theirs < sequence)
          behind +=
              detail::concat(behind.empty() ? "" : ", ", member_name(r), " (issued ", theirs, ")");
      }
    }
    store->set("diagnosed/" + self().name, bytes("1"));
  } catch (...) {
    if (rank() != 0)
      lost = member_name(0) + " (the rendezvous store at its address is unreachable)";
  }
  // Close this member's Gloo connections now: survivors blocked waiting on it fail at once
  // and come to read the verdict while the store is still up.
  group_.reset();
  if (server_ && store) {
    // This process hosts the store (no dist-store-host): keep it up until the surviving
    // members have read the verdict (bounded), or they would blame the store's host.
    const auto until = Clock::now() + std::chrono::seconds(5);
    for (int r : alive) {
      while (Clock::now() < until &&
             !store->check({"diagnosed/" + options_.members[static_cast<size_t>(r)].name}))
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (!failures.empty())
    throw CollectiveError(
        detail::concat(failures, "; ", member_name(rank()), " stops too (in ", what, ")"));
  if (!lost.empty())
    throw CollectiveError(detail::concat("lost worker: ", lost, " stopped responding during ", what,
                                         " (seen by ", member_name(rank()), "): ", error.what()));
  if (!behind.empty())
    throw CollectiveError(detail::concat("collective timeout: ", behind, " did not reach ", what,
                                         " (collective #", sequence, ") while ",
                                         member_name(rank()),
                                         " waited; every member must issue the same collectives "
                                         "in the same order: ",
                                         error.what()));
  throw CollectiveError(
      detail::concat(what, " failed on ", member_name(rank()), ": ", error.what()));
}

void GlooCommunicator::abort(const std::string& reason) {
  if (failed_.exchange(true)) return;  // already failed in a collective the others see too
  try {
    store_->set("failed/" + self().name, bytes(reason));
  } catch (const std::exception&) {
    // The store is gone: the peers' own diagnosis names this member as lost.
  }
  group_.reset();
}

std::string GlooCommunicator::failure_reports(c10d::Store& store) const {
  std::string reports;
  for (int r = 0; r < size(); ++r) {
    const std::string key = "failed/" + options_.members[static_cast<size_t>(r)].name;
    if (r == rank() || !store.check({key})) continue;
    reports += detail::concat(reports.empty() ? "" : "; ", member_name(r),
                              " failed: ", text(store.get(key)));
  }
  return reports;
}

void GlooCommunicator::check_usable(const char* what) const {
  DIST_CHECK(group_, CollectiveError, what, " on ", member_name(rank()),
             ": this communicator failed earlier (a worker was lost); recreate the strategy");
}

namespace {

using C10dWork = c10::intrusive_ptr<c10d::Work>;

// c10d work plus what to do once it completed (MEAN's division, cutting gathered parts).
class GlooWork : public Work {
 public:
  GlooWork(GlooCommunicator* owner, std::string what, int64_t sequence, std::vector<C10dWork> works,
           std::function<void()> finish)
      : owner_(owner),
        what_(std::move(what)),
        sequence_(sequence),
        works_(std::move(works)),
        finish_(std::move(finish)) {}

  void wait(std::chrono::milliseconds deadline) override {
    if (done_) return;
    try {
      for (auto& work : works_) {
        if (deadline.count() >= 0)
          work->wait(deadline);
        else
          work->wait();
      }
    } catch (const std::exception& e) {
      owner_->fail_collective(what_, sequence_, e);
    }
    if (finish_) finish_();
    done_ = true;
  }

  bool is_completed() override {
    for (auto& work : works_)
      if (!work->isCompleted()) return false;
    return true;
  }

 private:
  GlooCommunicator* owner_;
  std::string what_;
  int64_t sequence_;
  std::vector<C10dWork> works_;
  std::function<void()> finish_;
  bool done_ = false;
};

}  // namespace

void GlooCommunicator::check_same_collective(const std::string& what, int64_t sequence,
                                             const Fingerprint& mine) {
  const std::vector<int64_t> fields = {mine.kind, mine.elements, mine.dtype, mine.tensors};
  // MAX of (f, -f) gives every field's maximum and minimum in one small all-reduce.
  at::Tensor extremes = at::empty({8}, at::kLong);
  for (size_t i = 0; i < 4; ++i) {
    extremes[static_cast<int64_t>(i)] = fields[i];
    extremes[static_cast<int64_t>(i + 4)] = -fields[i];
  }
  std::vector<at::Tensor> one{extremes};
  try {
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::MAX;
    group_->allreduce(one, options)->wait(options_.collective_timeout);
  } catch (const std::exception& e) {
    fail_collective(what, sequence, e);
  }
  auto e = extremes.accessor<int64_t, 1>();
  bool same = true;
  for (int64_t i = 0; i < 4; ++i) same = same && e[i] == -e[i + 4];
  if (same) return;
  // Every member saw the disagreement (the same extremes): gather what each issued, to name it.
  at::Tensor all = at::empty({size(), 4}, at::kLong);
  try {
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size(); ++r) outputs[0].push_back(all[r]);
    std::vector<at::Tensor> input{at::tensor(fields, at::kLong)};
    group_->allgather(outputs, input)->wait(options_.collective_timeout);
  } catch (const std::exception& error) {
    fail_collective(what, sequence, error);
  }
  std::string issued;
  for (int r = 0; r < size(); ++r) {
    auto f = all[r];
    issued += detail::concat(r == 0 ? "" : ", ", member_name(r), " issued ",
                             describe({f[0].item<int64_t>(), f[1].item<int64_t>(),
                                       f[2].item<int64_t>(), f[3].item<int64_t>()}));
  }
  failed_ = true;  // every member throws this; none has more to tell the others
  throw CollectiveError(detail::concat(
      "collective mismatch at collective #", sequence, ": ", issued,
      "; the workers are running different steps (different settings, data or code): start "
      "every worker with the same settings"));
}

WorkHandle GlooCommunicator::issue(const std::string& what, int64_t sequence,
                                   const Fingerprint* fingerprint,
                                   const std::function<std::vector<C10dWork>()>& start,
                                   std::function<void()> finish) {
  check_usable(what.c_str());
  if (fingerprint != nullptr && options_.check_collectives)
    check_same_collective(what, sequence, *fingerprint);
  std::vector<C10dWork> works;
  try {
    works = start();
  } catch (const std::exception& e) {
    fail_collective(what, sequence, e);
  }
  return std::make_shared<GlooWork>(this, what, sequence, std::move(works), std::move(finish));
}

WorkHandle GlooCommunicator::all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) {
  if (tensors.empty()) return completed_work();
  std::function<void()> finish;
  if (op == ReduceOp::kMean) {
    finish = [tensors, n = size()]() mutable {
      for (auto& t : tensors) divide_for_mean(t, n);
    };
  }
  const Fingerprint fingerprint = fingerprint_of(all_reduce_kind(op), tensors);
  return issue(
      "all_reduce", next_sequence(), &fingerprint,
      [&]() -> std::vector<C10dWork> {
        c10d::AllreduceCoalescedOptions options;
        options.reduceOp = to_c10d(op);
        return {tensors.size() == 1 ? group_->allreduce(tensors, options)
                                    : group_->allreduce_coalesced(tensors, options)};
      },
      std::move(finish));
}

WorkHandle GlooCommunicator::broadcast(std::vector<at::Tensor>& tensors, int root) {
  DIST_CHECK_ARG(root >= 0 && root < size(), "broadcast root ", root, " is outside 0..",
                 size() - 1);
  const Fingerprint fingerprint = fingerprint_of(broadcast_kind(root), tensors);
  return issue("broadcast", next_sequence(), &fingerprint, [&] {
    c10d::BroadcastOptions options;
    options.rootRank = root;
    std::vector<C10dWork> works;
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t};
      works.push_back(group_->broadcast(one, options));
    }
    return works;
  });
}

WorkHandle GlooCommunicator::all_gather(const at::Tensor& input, at::Tensor* output) {
  // Gloo gathers equal shapes: exchange the sizes along dim 0 first, pad to the largest,
  // gather, then cut each member's part back to its size.
  const at::Tensor local = input.dim() == 0 ? input.reshape({1}) : input.contiguous();
  std::vector<at::Tensor> sizes(static_cast<size_t>(size()));
  for (auto& s : sizes) s = at::empty({1}, at::kLong);
  const Fingerprint sizes_fingerprint{kAllGatherSizesKind, 1, static_cast<int64_t>(at::kLong), 1};
  issue("all_gather (sizes)", next_sequence(), &sizes_fingerprint, [&]() -> std::vector<C10dWork> {
    std::vector<std::vector<at::Tensor>> outputs{sizes};
    std::vector<at::Tensor> inputs{at::tensor({local.size(0)}, at::kLong)};
    return {group_->allgather(outputs, inputs)};
  })->wait();
  int64_t largest = 0;
  for (const auto& s : sizes) largest = std::max(largest, s.item<int64_t>());
  auto padded_shape = local.sizes().vec();
  padded_shape[0] = largest;
  at::Tensor padded = at::zeros(padded_shape, local.options());
  padded.narrow(0, 0, local.size(0)).copy_(local);
  auto parts = std::make_shared<std::vector<std::vector<at::Tensor>>>(1);
  for (int r = 0; r < size(); ++r) (*parts)[0].push_back(at::empty_like(padded));
  const Fingerprint fingerprint{kAllGatherKind, padded.numel(),
                                static_cast<int64_t>(padded.scalar_type()), 1};
  return issue(
      "all_gather", next_sequence(), &fingerprint,
      [&]() -> std::vector<C10dWork> {
        std::vector<at::Tensor> inputs{padded};
        return {group_->allgather(*parts, inputs)};
      },
      [parts, sizes, output] {
        std::vector<at::Tensor> cut;
        for (size_t r = 0; r < sizes.size(); ++r)
          cut.push_back((*parts)[0][r].narrow(0, 0, sizes[r].item<int64_t>()));
        *output = at::cat(cut, 0);
      });
}

WorkHandle GlooCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                            ReduceOp op) {
  // LibTorch 1.13's ProcessGroupGloo has no reduce_scatter.
  return reduce_scatter_by_all_reduce(*this, input, output, op);
}

WorkHandle GlooCommunicator::barrier() {
  const Fingerprint fingerprint{kBarrierKind, 0, 0, 0};
  return issue("barrier", next_sequence(), &fingerprint,
               [&]() -> std::vector<C10dWork> { return {group_->barrier()}; });
}

WorkHandle GlooCommunicator::send(const at::Tensor& tensor, int to, int tag) {
  check_peer("send", member_name(rank()), rank(), to, size());
  // Point to point is tagged, not sequenced: 0 keeps it out of the missing-member diagnosis.
  return issue("send to " + member_name(to), 0, nullptr, [&]() -> std::vector<C10dWork> {
    std::vector<at::Tensor> one{tensor.contiguous()};
    return {group_->send(one, to, tag)};
  });
}

WorkHandle GlooCommunicator::recv(at::Tensor& tensor, int from, int tag) {
  check_peer("recv", member_name(rank()), rank(), from, size());
  DIST_CHECK_ARG(tensor.is_contiguous(), "recv needs a contiguous tensor");
  return issue("recv from " + member_name(from), 0, nullptr, [&]() -> std::vector<C10dWork> {
    std::vector<at::Tensor> one{tensor};
    return {group_->recv(one, from, tag)};
  });
}

std::vector<std::string> GlooCommunicator::exchange(const std::string& key,
                                                    const std::string& value) {
  store_->set("exchange/" + key + "/" + self().name, bytes(value));
  wait_for_all("exchange/" + key + "/", "reached the start-up check");
  std::vector<std::string> values;
  for (const auto& member : options_.members)
    values.push_back(text(store_->get("exchange/" + key + "/" + member.name)));
  return values;
}

}  // namespace dist::collective
