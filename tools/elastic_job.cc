#include "elastic_job.h"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>

#include "collective/store/store_host.h"
#include "dist/core/error.h"
#include "dist/distribute/cluster_resolver.h"
#include "distribute/cluster/elastic_membership.h"

namespace dist::tools {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> worker_names(const ClusterSpec& cluster) {
  std::vector<std::string> names;
  for (const auto& task : cluster.collective_tasks()) names.push_back(task.name());
  return names;
}

std::vector<std::string> missing_from(const std::vector<std::string>& before,
                                      const std::vector<std::string>& after) {
  std::vector<std::string> missing;
  for (const auto& name : before)
    if (std::find(after.begin(), after.end(), name) == after.end()) missing.push_back(name);
  return missing;
}

// What a joining worker must share with the job ("flag=value" lines): what decides its steps.
// The job's derived sizes come from these flags: an elastic job has --global-batch.
std::string elastic_settings(const TrainOptions& o) {
  auto settings = option_settings(o);
  settings.insert(settings.end(), {{"--global-batch", std::to_string(o.global_batch)},
                                   {"--train-examples", std::to_string(o.train_examples)},
                                   {"--test-examples", std::to_string(o.test_examples)},
                                   {"--min-workers", std::to_string(o.min_workers)},
                                   {"--commit-every", std::to_string(o.commit_every)}});
  std::string lines;
  for (const auto& [flag, value] : settings) lines += flag + "=" + value + "\n";
  return lines;
}

// The job between generations: who trains next, or why the job stops.
class Generations {
 public:
  Generations(const TrainOptions& options, const ClusterConfig& config)
      : options_(options),
        config_(config),
        self_(config.task.name()),
        settings_(elastic_settings(options)),
        members_(worker_names(config.cluster)) {
    DIST_CHECK_ARG(options.min_workers <= static_cast<int>(members_.size()), "--min-workers ",
                   options.min_workers, " is more than the ", members_.size(),
                   " workers of the cluster; the job could never start");
    // The job's one store must outlive every generation, generation 0's chief included.
    const collective::StoreHostChoice host = collective::locate_store_host();
    DIST_CHECK_ARG(!host.binary.empty(), "--min-workers ", options.min_workers,
                   " needs the rendezvous store in a process of its own (dist-store-host), which "
                   "outlives the generations and their chiefs; ",
                   host.missing ? "it was not found: set DIST_STORE_HOST to its path"
                                : "DIST_STORE_HOST=chief would keep it inside the chief: unset it");
  }
  // A worker that took part in the first generation's start-up but left before the job formed
  // (a failure, a signal) says so: the store's host then closes without waiting 3 s for its
  // beat to go stale. Once formed, ElasticMembership says it.
  ~Generations() {
    if (!membership_ && starting_)
      detail::ElasticMembership::leave_before_forming(config_.cluster.store_address(), job_token_,
                                                      job_id_, self_);
  }
  Generations(const Generations&) = delete;
  Generations& operator=(const Generations&) = delete;

  // Before a generation's start-up, in which this worker's heartbeat reaches the store.
  void starting() { starting_ = true; }

  const std::vector<std::string>& members() const { return members_; }
  int number() const { return number_; }

  enum class Start { kWithEveryWorker, kJoined, kJobFinished };

  // A worker that starts while the job runs joins it: the generation it joins, and its
  // members, come from the chief that admits it. Otherwise the job starts with every worker.
  // kJobFinished: the job completed before a step boundary could admit this worker (said on
  // standard output). A store left by a previous job on these addresses (it ended, or it has
  // another identity) is no job to join: this worker starts the new one, whose rendezvous
  // waits for that store to close.
  Start join_if_running(std::string& resize) {
    using State = detail::ElasticMembership::FoundJob::State;
    const auto found = detail::ElasticMembership::find_job(
        config_.cluster.store_address(), job_token_, job_id_, std::chrono::seconds(2));
    if (found.state == State::kEnded && found.same_job) {
      if (found.stopped) throw ElasticJobStopped(self_ + " has no job to join: " + found.how);
      return job_finished(found.how);
    }
    if (found.state == State::kEnded || found.state == State::kAnother) {
      std::cout << self_ << ": the rendezvous store at "
                << config_.cluster.store_address().to_string() << " is a previous job's ("
                << (found.state == State::kEnded
                        ? std::string(found.stopped ? "it stopped: " : "it finished ") + found.how
                        : std::string("it is closing"))
                << "); starting a new job once it has closed" << std::endl;
      return Start::kWithEveryWorker;
    }
    if (found.state == State::kNone) return Start::kWithEveryWorker;
    connect();
    const int64_t ticket = membership_->ask_to_join(settings_);
    std::cout << self_ << ": the elastic job runs already; asked to join" << std::endl;
    detail::ElasticMembership::Admission admission;
    try {
      admission = membership_->await_admission(ticket, rendezvous_timeout());
    } catch (const CollectiveError& e) {
      if (membership_->stopped()) throw ElasticJobStopped(e.what());  // exit 5: no restart
      throw;
    }
    if (admission.finished) return job_finished(*admission.finished);
    if (admission.job_gone) {
      std::cout << self_ << ": every worker of the job it asked to join was lost; starting the "
                << "job anew" << std::endl;
      membership_.reset();
      return Start::kWithEveryWorker;
    }
    // Its namesake is out of the group now: beat at once, or the members waiting for it in the
    // next rendezvous would see a heartbeat that stopped (rendezvous.cc, LostMembers).
    membership_->start_heartbeat();
    number_ = admission.generation;
    members_ = admission.members;
    resize =
        detail::concat("sizes ", admission.previous.size(), " -> ", members_.size(), " (joined ",
                       detail::join_names(missing_from(members_, admission.previous)), ")");
    return Start::kJoined;
  }

  // The job ended with `result` (`chief`: this worker is the last generation's chief).
  void finished(bool chief, const TrainResult& result) {
    if (!chief) return;
    membership_->mark_finished(detail::concat(
        result.interrupted ? "stopped by a signal after step " : "at step ", result.steps));
  }

  // Once a generation formed (its first chief started the job's store).
  void formed(bool chief) {
    connect();
    membership_->start_heartbeat();
    if (chief) membership_->mark_running(number_, static_cast<int>(members_.size()));
  }
  std::vector<int> sizes() { return membership_->sizes(number_); }
  bool join_requested() { return membership_->join_requested(members_, settings_); }

  // At a step boundary where workers join: the next members. `resize` gets "sizes 2 -> 3
  // (joined worker:1)". Throws CollectiveError when the chief is lost before it decides, or
  // when this worker is not among the next members (the others took the boundary as a loss:
  // the vote that led here failed on them), for the caller to treat as a loss.
  void regroup(bool chief, std::string& resize) {
    std::optional<std::vector<std::string>> decided =
        chief ? membership_->admit_joiners(number_, members_, settings_)
              : membership_->next_members(number_, members_.front());
    DIST_CHECK(decided.has_value(), CollectiveError, "lost worker: ", members_.front(),
               " (the chief) before it admitted the workers waiting to join");
    const std::vector<std::string> next = *decided;
    DIST_CHECK(std::find(next.begin(), next.end(), self_) != next.end(), CollectiveError, self_,
               " is not among the next members (", detail::join_names(next),
               "): the others took this step boundary as a loss");
    const std::vector<std::string> joined = missing_from(next, members_);
    resize += detail::concat(resize.empty() ? "" : ", then ", "sizes ", members_.size(), " -> ",
                             next.size(),
                             joined.empty() ? "" : " (joined " + detail::join_names(joined) + ")");
    members_ = next;
    ++number_;
  }

  // After the generation failed with `error` on this worker: the next members, or throws the
  // reason the job stops. `resize` gets "sizes 3 -> 2 (lost worker:1)".
  // Called from the handler of the generation's CollectiveError, which `throw;` passes on.
  void after_loss(int64_t committed, std::string& resize) {
    if (!membership_) throw;  // lost before the job formed: nothing to go on from
    const auto wait = whole_milliseconds("--collective-timeout", options_.collective_timeout) +
                      std::chrono::seconds(10);
    std::vector<std::string> next;
    try {
      next = membership_->next_after_loss(number_, members_, wait);
    } catch (const CollectiveError& e) {
      // Only the store can fail here: without it no survivor can agree, nor a worker join, and
      // a worker started again would begin a new job from step 0. So the job stops, saying so.
      throw ElasticJobStopped(detail::concat(
          "the elastic job stops: it lost its rendezvous store at ",
          config_.cluster.store_address().to_string(),
          " (dist-store-host), without which its workers cannot agree on who goes on: ", e.what(),
          "; the last committed step is ", committed,
          " (start the job again with --checkpoint-dir to resume from a checkpoint)"));
    }
    const std::vector<std::string> lost = missing_from(members_, next);
    if (lost.empty() && next.size() <= members_.size()) throw;  // no loss to mend
    DIST_CHECK(std::find(next.begin(), next.end(), self_) != next.end(), CollectiveError, self_,
               " was left out of the job's next generation by the other workers (",
               detail::join_names(next), "): it did not say it stays within ", wait.count() / 1000,
               " s of the loss; the job goes on without it");
    const std::string names = detail::join_names(lost);
    if (static_cast<int>(next.size()) < options_.min_workers) {
      const std::string why = detail::concat(
          "the elastic job stops: lost ", names, "; ", next.size(),
          " worker(s) remain, fewer than --min-workers ", options_.min_workers,
          "; the last committed step is ", committed,
          " (start the job again with --checkpoint-dir to resume from a checkpoint)");
      membership_->mark_stopped(why);  // a worker started later must not wait to join
      throw ElasticJobStopped(why);
    }
    resize += detail::concat(resize.empty() ? "" : ", then ", "sizes ", members_.size(), " -> ",
                             next.size(), " (lost ", names, ")");
    members_ = next;
    ++number_;
  }

 private:
  Start job_finished(const std::string& how) {
    std::cout << self_ << ": the elastic job finished (" << how
              << ") before a step boundary could admit it; nothing to do" << std::endl;
    return Start::kJobFinished;
  }
  std::chrono::milliseconds rendezvous_timeout() const {
    return whole_milliseconds("--rendezvous-timeout", options_.rendezvous_timeout);
  }
  void connect() {
    if (membership_) return;
    membership_ = std::make_unique<detail::ElasticMembership>(
        config_.cluster.store_address(), job_token_, job_id_, self_, rendezvous_timeout());
  }

  const TrainOptions& options_;
  const ClusterConfig& config_;
  std::string self_;
  std::string job_token_ = job_token_from_environment();
  std::string job_id_ = job_id_from_environment();
  std::string settings_;
  int number_ = 0;
  bool starting_ = false;
  std::vector<std::string> members_;
  std::unique_ptr<detail::ElasticMembership> membership_;
};

int64_t min_across_workers(int64_t value, const Strategy& strategy) {
  std::vector<at::Tensor> values{at::tensor({value}, at::kLong)};
  strategy.extended().all_reduce_across_workers(values, ReduceOp::kMin);
  return values[0].item<int64_t>();
}

// `bytes` of the one worker that passes any (the others pass none), on every worker: its size
// and then its words in two all-reduces, where the others add zeros.
std::string send_bytes(const std::string& bytes, const Strategy& strategy) {
  std::vector<at::Tensor> size{at::tensor({static_cast<int64_t>(bytes.size())}, at::kLong)};
  strategy.extended().all_reduce_across_workers(size, ReduceOp::kMax);
  const int64_t length = size[0].item<int64_t>();
  std::vector<at::Tensor> words{at::zeros({(length + 7) / 8}, at::kLong)};
  if (!bytes.empty()) std::memcpy(words[0].data_ptr(), bytes.data(), bytes.size());
  strategy.extended().all_reduce_across_workers(words, ReduceOp::kSum);
  return std::string(static_cast<const char*>(words[0].data_ptr()), static_cast<size_t>(length));
}

}  // namespace

std::string CommittedStates::path_of(int64_t number) {
  return "/committed/" + std::to_string(number) + ".safetensors";
}

void CommittedStates::forget_front() {
  env_.remove_file(path_of(commits_.front().number));
  commits_.pop_front();
}

void CommittedStates::commit(const Checkpoint& checkpoint) {
  const int64_t number = latest() < 0 ? 1 : latest() + 1;
  checkpoint.write(path_of(number), &env_);
  commits_.push_back({number, checkpoint.state.step});
  while (commits_.size() > 2) forget_front();
}

bool CommittedStates::has(int64_t number) const {
  return std::any_of(commits_.begin(), commits_.end(),
                     [number](const Commit& c) { return c.number == number; });
}

void CommittedStates::restore(int64_t number, Checkpoint& checkpoint) {
  checkpoint.read(path_of(number), &env_);
  while (commits_.back().number != number) {
    env_.remove_file(path_of(commits_.back().number));
    commits_.pop_back();
  }
  commits_.back().step = checkpoint.state.step;  // unknown for a commit adopted as bytes
}

std::string CommittedStates::bytes_of(int64_t number) const {
  auto file = env_.new_random_access_file(path_of(number));
  std::string bytes(file->size(), '\0');
  file->read(0, bytes.size(), bytes.data());
  return bytes;
}

void CommittedStates::adopt(int64_t number, const std::string& bytes) {
  while (!commits_.empty()) forget_front();
  auto file = env_.new_writable_file(path_of(number));
  file->append(bytes.data(), bytes.size());
  file->close();
  commits_.push_back({number, -1});  // the step is read with it
}

void ElasticRun::commit(Checkpoint& checkpoint) {
  // A worker that joins learns it from the commit: every worker must say the same step in
  // check_workers_agree's "the step resumed from".
  checkpoint.state.values["elastic.resumed_at_step"] = std::to_string(resumed_at_step);
  committed.commit(checkpoint);
}

bool ElasticRun::regroup_now(const Strategy& strategy, bool chief, bool stopping) {
  // Workers waiting to join take part from the next step: every worker stops here.
  return !stopping && strategy.any_worker(chief && join_requested && join_requested());
}

// The newest commit every survivor holds (CommittedStates says why it exists). A worker that
// joins holds none: it receives the commit from the first worker that does.
bool ElasticRun::restore_committed(const Strategy& strategy, Checkpoint& checkpoint,
                                   std::ostream& out) {
  const int64_t none = std::numeric_limits<int64_t>::max();
  const int64_t number =
      min_across_workers(committed.latest() < 0 ? none : committed.latest(), strategy);
  if (number == none) return false;  // nobody holds one: the checkpoint directory, or afresh
  const bool held = committed.has(number);
  DIST_CHECK(held || committed.latest() < 0, InternalError, "commit ", number,
             " is no longer in this worker's memory (newest ", committed.latest(), ")");
  const int64_t sender = min_across_workers(held ? strategy.worker_index() : none, strategy);
  int64_t sent = 0;
  if (strategy.any_worker(!held)) {
    const std::string bytes =
        send_bytes(strategy.worker_index() == sender ? committed.bytes_of(number) : "", strategy);
    if (!held) committed.adopt(number, bytes);
    sent = static_cast<int64_t>(bytes.size());
  }
  committed.restore(number, checkpoint);
  // A commit is no resume of the job: it keeps saying the checkpoint the job resumed from.
  const auto resumed = checkpoint.state.values.find("elastic.resumed_at_step");
  if (resumed != checkpoint.state.values.end()) resumed_at_step = std::stoll(resumed->second);
  out << "Resumed from the state committed in memory at step " << checkpoint.state.step
      << " (epoch " << checkpoint.state.position.epoch + 1 << ", batch "
      << checkpoint.state.position.elements << ")" << std::endl;
  if (sent > 0) out << "(sent to the joining workers: " << sent << " bytes)" << std::endl;
  return true;
}

void ElasticRun::report_recovery(std::ostream& out, int64_t step) {
  if (!recovering_since) return;
  std::ostringstream seconds;  // not on `out`, whose precision would stay changed
  seconds << std::fixed << std::setprecision(2)
          << std::chrono::duration<double>(Clock::now() - *recovering_since).count();
  out << "Elastic: " << resize << "; step " << step << " done " << seconds.str() << " s after "
      << recovering_from << std::endl;
  recovering_since.reset();
  resize.clear();
}

TrainResult run_elastic_training(const TrainOptions& options, std::ostream& chief_out,
                                 const GenerationTraining& train) {
  const ClusterConfig config = resolve_cluster().config;
  Generations generations(options, config);
  ElasticRun elastic;
  SignalsEndWaits joining;
  const Generations::Start start = generations.join_if_running(elastic.resize);
  joining.done();
  switch (start) {
    case Generations::Start::kJobFinished: {
      TrainResult nothing;
      nothing.chief = false;  // no result line: the job's chief printed it
      return nothing;
    }
    case Generations::Start::kJoined:
      elastic.recovering_since = Clock::now();
      elastic.recovering_from = "this worker was admitted";
      break;
    case Generations::Start::kWithEveryWorker:
      break;
  }
  elastic.commit_every = options.commit_every;
  while (true) {
    try {
      generations.starting();
      JobSetup job = start_job(options, chief_out,
                               WorkerGeneration{generations.number(), generations.members()});
      generations.formed(job.chief);
      elastic.join_requested = [&] { return generations.join_requested(); };
      TrainResult result = train(job, elastic);
      if (!result.regroup) {
        result.worker_sizes = generations.sizes();
        generations.finished(job.chief, result);
        return result;
      }
      elastic.recovering_since = Clock::now();
      elastic.recovering_from = "the step boundary where the workers regrouped";
      SignalsEndWaits regrouping;
      generations.regroup(job.chief, elastic.resize);  // a loss meanwhile: the handler below
      regrouping.done();
    } catch (const CollectiveError& e) {
      if (!elastic.recovering_since) {  // else a second loss before the first was mended
        elastic.recovering_since = Clock::now();
        elastic.recovering_from = "this worker saw the loss";
      }
      std::cerr << "dist-train: " << config.task.name() << ": generation " << generations.number()
                << " failed: " << e.what() << std::endl;
      if (options.on_loss) options.on_loss("seen");
      SignalsEndWaits agreeing;
      generations.after_loss(elastic.committed.latest_step(), elastic.resize);
      agreeing.done();
      if (options.on_loss) options.on_loss("agreed");
    }
  }
}

}  // namespace dist::tools
