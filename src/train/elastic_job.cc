// ElasticJob and ElasticGeneration (train/elastic_job.h): the generations' loop, and what a
// generation's training asks of the job at its step boundaries; ElasticContext and run_elastic
// (dist/train/elastic.h), the face of them a loop sees.
#include "train/elastic_job.h"

#include <chrono>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>

#include "dist/core/timeline.h"
#include "dist/distribute/cluster_resolver.h"
#include "dist/distribute/strategy_extended.h"
#include "dist/train/preemption.h"
#include "train/committed_states.h"
#include "train/elastic_generations.h"
#include "train/elastic_test_hooks.h"

namespace dist {
namespace detail {
namespace {

std::function<void(const std::string&)>& loss_hook() {
  static std::function<void(const std::string&)> hook;
  return hook;
}

}  // namespace

void set_elastic_loss_hook(std::function<void(const std::string& stage)> hook) {
  loss_hook() = std::move(hook);
}

}  // namespace detail

using Clock = std::chrono::steady_clock;

// What lasts across the generations of one worker's job.
struct ElasticGeneration::State {
  State(const ElasticOptions& given, detail::Generations& generations_of_job)
      : options(given), generations(generations_of_job) {}

  const ElasticOptions& options;
  detail::Generations& generations;
  detail::CommittedStates committed;
  int64_t resumed_at_step = -1;
  // Set from a resize until the next step completes: then the time between is said.
  std::optional<Clock::time_point> recovering_since;
  std::string recovering_from;  // "this worker saw the loss", ...
  std::string resize;           // "sizes 3 -> 2 (lost worker:1)", said with the recovery time
  WorkerGeneration workers;

  void recovering(const char* from) {
    recovering_since = Clock::now();
    recovering_from = from;
  }
};

namespace {

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

ElasticGeneration::ElasticGeneration(State& state) : state_(state) {}
ElasticGeneration::~ElasticGeneration() = default;

const WorkerGeneration& ElasticGeneration::workers() const { return state_.workers; }

Strategy ElasticGeneration::make_strategy(MultiWorkerOptions options) {
  DIST_CHECK_ARG(!strategy_, "ElasticGeneration::make_strategy was called twice in generation ",
                 state_.workers.number, "; a generation has one strategy");
  options.cluster = state_.options.cluster;
  options.generation = state_.workers;
  strategy_.emplace(MultiWorkerMirroredStrategy(options));
  state_.generations.formed(chief());
  return *strategy_;
}

bool ElasticGeneration::chief() const {
  DIST_CHECK_ARG(strategy_.has_value(), "ElasticGeneration: make_strategy first");
  return strategy_->worker_index() == 0;
}

bool ElasticGeneration::commit_due(int64_t step) const {
  const int64_t every = state_.options.commit_every;
  return every > 0 && step % every == 0;
}

void ElasticGeneration::commit(Checkpoint& checkpoint) {
  TimelineSpan span("commit", "elastic");
  // A worker that joins learns it from the commit: every worker must say the same step in
  // check_workers_agree's "the step resumed from".
  checkpoint.state.values["elastic.resumed_at_step"] = std::to_string(state_.resumed_at_step);
  state_.committed.commit(checkpoint);
}

bool ElasticGeneration::regroup_now(bool stopping) {
  // Workers waiting to join take part from the next step: every worker stops here.
  const bool asked = chief() && state_.generations.join_requested();
  regroup_ = !stopping && strategy_->any_worker(asked);
  return regroup_;
}

bool ElasticGeneration::regrouping() const { return regroup_; }

// The newest commit every survivor holds (CommittedStates says why it exists). A worker that
// joins holds none: it receives the commit from the first worker that does.
bool ElasticGeneration::restore(Checkpoint& checkpoint, std::ostream& out) {
  DIST_CHECK_ARG(strategy_.has_value(), "ElasticGeneration: make_strategy first");
  const Strategy& strategy = *strategy_;
  detail::CommittedStates& committed = state_.committed;
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
  if (resumed != checkpoint.state.values.end())
    state_.resumed_at_step = std::stoll(resumed->second);
  out << "Resumed from the state committed in memory at step " << checkpoint.state.step
      << " (epoch " << checkpoint.state.position.epoch + 1 << ", batch "
      << checkpoint.state.position.elements << ")" << std::endl;
  if (sent > 0) out << "(sent to the joining workers: " << sent << " bytes)" << std::endl;
  return true;
}

int64_t ElasticGeneration::resumed_at_step() const { return state_.resumed_at_step; }
void ElasticGeneration::set_resumed_at_step(int64_t step) { state_.resumed_at_step = step; }

void ElasticGeneration::report_recovery(std::ostream& out, int64_t step) {
  if (!state_.recovering_since) return;
  std::ostringstream seconds;  // not on `out`, whose precision would stay changed
  seconds << std::fixed << std::setprecision(2)
          << std::chrono::duration<double>(Clock::now() - *state_.recovering_since).count();
  out << "Elastic: " << state_.resize << "; step " << step << " done " << seconds.str()
      << " s after " << state_.recovering_from << std::endl;
  state_.recovering_since.reset();
  state_.resize.clear();
}

struct ElasticJob::Impl {
  ElasticOptions options;
  detail::Generations generations;
  ElasticGeneration::State state;

  explicit Impl(ElasticOptions given)
      : options(with_cluster(std::move(given))),
        generations(options, *options.cluster),
        state(options, generations) {}

  static ElasticOptions with_cluster(ElasticOptions options) {
    if (!options.cluster) options.cluster = resolve_cluster().config;
    return options;
  }
  // One generation: true when it ended with the job (else the workers regroup).
  bool run_generation(const std::function<GenerationEnd(ElasticGeneration&)>& train,
                      ElasticResult& result);
  // After a CollectiveError out of a generation: the survivors' next generation, or throws.
  void after_loss(const CollectiveError& error);
};

bool ElasticJob::Impl::run_generation(const std::function<GenerationEnd(ElasticGeneration&)>& train,
                                      ElasticResult& result) {
  generations.starting();
  state.workers = WorkerGeneration{generations.number(), generations.members()};
  ElasticGeneration generation(state);
  result.end = train(generation);
  DIST_CHECK_ARG(generation.strategy_.has_value(),
                 "an elastic generation's training must make "
                 "its strategy with ElasticGeneration::make_strategy");
  result.chief = generation.chief();
  if (!generation.regrouping()) {
    result.worker_sizes = generations.sizes();
    generations.finished(result.chief, result.end);
    return true;
  }
  state.recovering("the step boundary where the workers regrouped");
  StopSignalsEndWaits regrouping("regrouping");
  generations.regroup(result.chief, state.resize);  // a loss meanwhile: the caller's handler
  regrouping.done();
  return false;
}

void ElasticJob::Impl::after_loss(const CollectiveError& error) {
  if (!state.recovering_since)  // else a second loss before the first was mended
    state.recovering("this worker saw the loss");
  std::cerr << options.cluster->task.name() << ": generation " << generations.number()
            << " failed: " << error.what() << std::endl;
  const auto& hook = detail::loss_hook();
  if (hook) hook("seen");
  StopSignalsEndWaits agreeing("agreeing on the next generation");
  generations.after_loss(state.committed.latest_step(), state.resize);
  agreeing.done();
  if (hook) hook("agreed");
}

ElasticJob::ElasticJob(ElasticOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
ElasticJob::~ElasticJob() = default;

ElasticResult ElasticJob::run(const std::function<GenerationEnd(ElasticGeneration&)>& train) {
  Impl& job = *impl_;
  ElasticResult result;
  StopSignalsEndWaits joining("joining the elastic job");
  const auto start = job.generations.join_if_running(job.state.resize);
  joining.done();
  if (start == detail::Generations::Start::kJobFinished) {
    result.took_part = false;
    return result;
  }
  if (start == detail::Generations::Start::kJoined)
    job.state.recovering("this worker was admitted");
  while (true) {
    try {
      if (job.run_generation(train, result)) return result;
    } catch (const CollectiveError& e) {
      job.after_loss(e);  // rethrows (from its handler's context) when there is nothing to mend
    }
  }
}

ElasticContext::ElasticContext(ElasticGeneration& generation, const MultiWorkerOptions& options)
    : generation_(generation), options_(options) {}

Strategy& ElasticContext::strategy() {
  if (!strategy_) strategy_.emplace(generation_.make_strategy(options_));
  return *strategy_;
}

bool ElasticContext::chief() const {
  DIST_CHECK_ARG(strategy_.has_value(),
                 "ElasticContext::chief before the generation's strategy: "
                 "call strategy() (or track) first");
  return generation_.chief();
}

const WorkerGeneration& ElasticContext::workers() const { return generation_.workers(); }

bool ElasticContext::track(Checkpoint& state, std::ostream& out) {
  DIST_CHECK_ARG(state_ == nullptr, "ElasticContext::track was called twice in generation ",
                 generation_.workers().number, "; a generation tracks one state");
  strategy();  // the restore is a collective of the generation
  state_ = &state;
  out_ = &out;
  return generation_.restore(state, out);  // else the loop's own start
}

Checkpoint& ElasticContext::tracked(const char* call) {
  DIST_CHECK_ARG(state_ != nullptr, "ElasticContext::", call,
                 " before track: register the loop's state first");
  return *state_;
}

bool ElasticContext::step_done(const data::IteratorPosition& after, int64_t last_step) {
  Checkpoint& state = tracked("step_done");
  const int64_t step = ++state.state.step;
  state.state.position = after;
  step_completed(step);
  const bool last = last_step > 0 && step >= last_step;
  if (boundary_due(step) || last) {
    commit();
    if (regroup_now(/*stopping=*/last)) return false;
  }
  return !last;
}

int64_t ElasticContext::step() const { return state_ ? state_->state.step : 0; }

bool ElasticContext::regrouping() const { return generation_.regrouping(); }

bool ElasticContext::boundary_due(int64_t step) const { return generation_.commit_due(step); }

void ElasticContext::step_completed(int64_t step) { generation_.report_recovery(*out_, step); }

void ElasticContext::commit() { generation_.commit(tracked("commit")); }

bool ElasticContext::regroup_now(bool stopping) {
  tracked("regroup_now");  // the next generation goes on from the commit: there must be one
  return generation_.regroup_now(stopping);
}

int64_t ElasticContext::resumed_at_step() const { return generation_.resumed_at_step(); }

void ElasticContext::set_resumed_at_step(int64_t step) { generation_.set_resumed_at_step(step); }

GenerationEnd ElasticContext::end() const { return end_ ? *end_ : GenerationEnd{step()}; }

ElasticResult run_elastic(ElasticOptions options,
                          const std::function<void(ElasticContext&)>& train) {
  const MultiWorkerOptions strategy = options.strategy;
  ElasticJob job(std::move(options));
  return job.run([&](ElasticGeneration& generation) {
    ElasticContext context(generation, strategy);
    train(context);
    DIST_CHECK_ARG(context.strategy_.has_value(),
                   "run_elastic's training function returned "
                   "without taking part in generation ",
                   generation.workers().number,
                   ": call ElasticContext::strategy() (or track) before anything else");
    return context.end();
  });
}

}  // namespace dist
