#include "ps/coordinator.h"

#include <algorithm>
#include <future>
#include <iostream>
#include <optional>

#include "core/stop_request.h"
#include "dist/core/error.h"
#include "ps/ps_service.h"
#include "ps/rpc_status.h"
#include "ps/task_liveness.h"
#include "ps/task_server.h"
#include "ps/tensor_codec.h"
#include "ps/worker_service.h"

namespace dist::detail {
namespace {

using Clock = std::chrono::steady_clock;

// A step's failure as the library error the coordinator's caller sees.
std::exception_ptr step_error(const grpc::Status& status, const std::string& function) {
  const std::string message = concat("step '", function, "' failed on ", status.error_message());
  switch (status.error_code()) {
    case grpc::StatusCode::OUT_OF_RANGE:
      return std::make_exception_ptr(OutOfRange(message));
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::INVALID_ARGUMENT:
      return std::make_exception_ptr(InvalidArgument(message));
    default:
      return std::make_exception_ptr(Error(message));
  }
}

std::exception_ptr shut_down_error() {
  return std::make_exception_ptr(
      InvalidArgument("ClusterCoordinator: the coordinator was shut down before this step ran"));
}

void log(const std::string& message) { std::cerr << "coordinator: " << message << std::endl; }

}  // namespace

void RemoteState::finish(StepRegistry::Results values, std::exception_ptr failure) {
  std::lock_guard<std::mutex> lock(mutex);
  results = std::move(values);
  error = std::move(failure);
  ready = true;
  ready_changed.notify_all();
}

void RemoteState::wait() {
  std::unique_lock<std::mutex> lock(mutex);
  ready_changed.wait(lock, [&] { return ready; });
}

CoordinatorImpl::CoordinatorImpl(Strategy strategy, ParameterServerExtended& extended)
    : strategy_(std::move(strategy)),
      extended_(extended),
      registry_(std::make_shared<StepRegistry>()),
      chief_(extended.task_type() == "chief") {
  if (!chief_) return;
  const ClusterSpec& cluster = extended_.config().cluster;
  for (int i = 0; i < cluster.num_tasks("worker"); ++i) {
    const TaskSpec task{"worker", i};
    const std::string address = cluster.address(task).to_string();
    workers_.push_back({task.name(), address, rpc::Worker::NewStub(ps::open_channel(address))});
  }
  for (int i = 0; i < cluster.num_tasks("ps"); ++i)
    ps_stubs_.push_back(rpc::ParameterServer::NewStub(
        ps::open_channel(cluster.address(TaskSpec{"ps", i}).to_string())));
  running_.resize(workers_.size());
  worker_up_.assign(workers_.size(), false);
  worker_heard_from_.assign(workers_.size(), false);
  started_at_ = some_worker_up_at_ = Clock::now();
  // From now on the other tasks hear from the coordinator, even before the first step.
  heartbeat_ = std::thread([this] { heartbeat(); });
}

CoordinatorImpl::~CoordinatorImpl() { shutdown(); }

int64_t CoordinatorImpl::add_dataset(StepRegistry::DatasetFunction function) {
  std::lock_guard<std::mutex> lock(registry_->mutex);
  registry_->datasets.push_back(std::move(function));
  return static_cast<int64_t>(registry_->datasets.size()) - 1;
}

bool CoordinatorImpl::sleep_for(std::chrono::milliseconds period) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, period, [&] { return stopping_; });
  return !stopping_;
}

int CoordinatorImpl::serve() {
  const ClusterConfig& config = extended_.config();
  const std::string task = extended_.task_description();
  DIST_CHECK_ARG(!chief_, "ClusterCoordinator::serve: ", task,
                 " is the coordinator; it schedules steps (serve() is for ps and worker tasks)");
  const auto& options = extended_.options();
  ps::TaskLiveness liveness(options.coordinator_timeout);
  const std::string address = config.cluster.address(config.task).to_string();
  std::unique_ptr<grpc::Service> service;
  if (extended_.task_type() == "ps") {
    service = std::make_unique<ps::ParameterServerService>(task, &liveness);
  } else {
    InputContext input;
    input.num_input_pipelines = config.cluster.num_tasks("worker");
    input.input_pipeline_id = config.task.index;
    service =
        std::make_unique<ps::WorkerService>(task, config.task.index, input, registry_, &liveness);
  }
  ps::TaskServer server(config.task.name(), address, {service.get()});
  std::cerr << task << ": serving" << std::endl;
  const auto ending = liveness.wait([] { return detail::pending_stop_signal() != 0; });
  if (ending == ps::TaskLiveness::Ending::kShutdown) {
    std::cerr << task << ": the coordinator ended the job" << std::endl;
    return 0;
  }
  if (ending == ps::TaskLiveness::Ending::kStopRequested) {
    std::cerr << task << ": stopped by signal " << detail::pending_stop_signal()
              << " while serving; this task exits" << std::endl;
    return 4;
  }
  std::cerr << task << ": no word from the coordinator (chief "
            << config.cluster.address(TaskSpec{"chief", 0}).to_string() << ") for "
            << options.coordinator_timeout.count() << " ms; it is lost, so this task exits"
            << std::endl;
  return 3;
}

void CoordinatorImpl::start_workers() {
  for (size_t i = 0; i < workers_.size(); ++i) threads_.emplace_back([this, i] { run_worker(i); });
}

bool CoordinatorImpl::ping_worker(WorkerTask& worker, std::chrono::milliseconds deadline) {
  rpc::PingRequest request;
  request.set_from(ps::kCoordinatorTask);
  rpc::PingResponse response;
  return worker.stub->Ping(ps::context_with_deadline(deadline).get(), request, &response).ok();
}

RemoteValue CoordinatorImpl::schedule(const std::string& function, int64_t dataset, int64_t epoch,
                                      std::vector<at::Tensor> arguments) {
  DIST_CHECK_ARG(chief_, "ClusterCoordinator::schedule: ", extended_.task_description(),
                 " is not the coordinator; only the chief schedules steps (call serve() here)");
  {
    std::lock_guard<std::mutex> lock(registry_->mutex);
    DIST_CHECK_ARG(registry_->functions.count(function) == 1,
                   "ClusterCoordinator::schedule: no "
                   "step function '",
                   function, "' is registered; call register_function first");
    DIST_CHECK_ARG(dataset < static_cast<int64_t>(registry_->datasets.size()),
                   "ClusterCoordinator::schedule: per-worker dataset ", dataset,
                   " was not made by create_per_worker_dataset");
  }
  auto call = std::make_shared<Call>();
  call->request.set_function(function);
  call->request.set_dataset(dataset);
  call->request.set_epoch(epoch);
  for (const auto& argument : arguments) ps::encode_tensor(argument, call->request.add_arguments());
  call->state = std::make_shared<RemoteState>();
  std::lock_guard<std::mutex> lock(mutex_);
  if (job_error_) std::rethrow_exception(job_error_);
  DIST_CHECK_ARG(!shut_down_, "ClusterCoordinator::schedule: the coordinator was shut down");
  if (threads_.empty()) start_workers();
  queue_.push_back(call);
  ++unfinished_;
  changed_.notify_all();
  RemoteValue value;
  value.state_ = call->state;
  return value;
}

void CoordinatorImpl::finish_call(const Call& call, StepRegistry::Results values,
                                  std::exception_ptr error) {
  call.state->finish(std::move(values), error);
  std::lock_guard<std::mutex> lock(mutex_);
  --unfinished_;
  if (error && !first_call_error_) first_call_error_ = error;
  changed_.notify_all();
}

void CoordinatorImpl::run_worker(size_t index) {
  bool lost_before = false;
  for (;;) {
    const Reach reach = reach_worker(index, lost_before);
    if (reach == Reach::kStopping) return;
    if (reach == Reach::kDown) continue;
    std::shared_ptr<grpc::ClientContext> context;
    const std::shared_ptr<Call> call = take_call(index, &context);
    if (!call) return;
    rpc::RunResponse response;
    const grpc::Status status = workers_[index].stub->Run(context.get(), call->request, &response);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_[index].reset();
    }
    if (status.ok()) {
      finish_with_response(*call, response);
    } else if (!ps::is_unreachable(status)) {
      finish_call(*call, {}, step_error(status, call->request.function()));
    } else {
      lost_before = true;
      run_elsewhere(index, call, status);
    }
  }
}

CoordinatorImpl::Reach CoordinatorImpl::reach_worker(size_t index, bool lost_before) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return Reach::kStopping;
    if (worker_up_[index]) return Reach::kUp;
  }
  WorkerTask& worker = workers_[index];
  const auto ping_deadline =
      std::min<std::chrono::milliseconds>(extended_.options().rpc_timeout, std::chrono::seconds(1));
  if (!ping_worker(worker, ping_deadline))
    return sleep_for(std::chrono::milliseconds(200)) ? Reach::kDown : Reach::kStopping;
  std::lock_guard<std::mutex> lock(mutex_);
  worker_up_[index] = true;
  worker_heard_from_[index] = true;
  some_worker_up_at_ = Clock::now();
  if (lost_before) log(worker.describe() + " is back and gets steps again");
  return Reach::kUp;
}

std::shared_ptr<CoordinatorImpl::Call> CoordinatorImpl::take_call(
    size_t index, std::shared_ptr<grpc::ClientContext>* context) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
  if (stopping_) return nullptr;
  std::shared_ptr<Call> call = queue_.front();
  queue_.pop_front();
  *context = ps::context_with_deadline(extended_.options().step_timeout);
  running_[index] = *context;
  return call;
}

void CoordinatorImpl::finish_with_response(const Call& call, const rpc::RunResponse& response) {
  StepRegistry::Results results;
  std::exception_ptr error;
  try {
    for (int i = 0; i < response.results_size(); ++i)
      results.emplace_back(
          i < response.keys_size() ? response.keys(i) : "",
          ps::decode_tensor(response.results(i),
                            concat("result ", i, " of step '", call.request.function(), "'")));
  } catch (...) {
    error = std::current_exception();
  }
  finish_call(call, std::move(results), error);
}

// The worker is lost (killed, hung past step_timeout, or its host is gone): the step runs
// again on another worker, at least once in all.
void CoordinatorImpl::run_elsewhere(size_t index, const std::shared_ptr<Call>& call,
                                    const grpc::Status& status) {
  std::exception_ptr job_error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) job_error = shut_down_error();
    worker_up_[index] = false;
    if (!job_error) job_error = job_error_;
    if (!job_error) {
      queue_.push_front(call);
      changed_.notify_all();
    }
  }
  if (job_error) {
    finish_call(*call, {}, job_error);
  } else {
    log(concat(workers_[index].describe(), " is lost (", status.error_message(), "); its step '",
               call->request.function(), "' runs again on another worker"));
  }
}

namespace {

// The heartbeat's ping of one task: at most one in flight, and polling never waits for it, since
// a task that does not answer (stopped, or its host gone) takes up to rpc_timeout per ping and
// the other tasks must keep hearing from the coordinator meanwhile, or they give up on it.
class PendingPing {
 public:
  // The status of the ping that has ended since the last poll, if one has; then a new ping is
  // started unless one is still in flight. `failures` counts the unanswered ones in a row (an
  // error the task sent back is an answer: it is alive).
  template <class Stub>
  std::optional<grpc::Status> poll(Stub* stub, std::chrono::milliseconds timeout) {
    std::optional<grpc::Status> ended;
    if (reply_.valid() && reply_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      ended = reply_.get();
      failures = ps::is_unreachable(*ended) ? failures + 1 : 0;
    }
    if (!reply_.valid()) {
      context_ = ps::context_with_deadline(timeout);
      reply_ = std::async(std::launch::async, [stub, context = context_] {
        rpc::PingRequest request;
        request.set_from(ps::kCoordinatorTask);
        rpc::PingResponse response;
        return stub->Ping(context.get(), request, &response);
      });
    }
    return ended;
  }

  // Ends a ping still in flight at once: the heartbeat is stopping, and the shutdown that
  // follows must reach the other tasks before their coordinator_timeout, not wait up to
  // rpc_timeout for a stopped one (a std::async future waits for its call when destroyed).
  ~PendingPing() {
    if (reply_.valid() && context_) context_->TryCancel();
  }
  PendingPing() = default;
  PendingPing(PendingPing&&) = default;

  int failures = 0;

 private:
  std::shared_ptr<grpc::ClientContext> context_;
  std::future<grpc::Status> reply_;
};

}  // namespace

void CoordinatorImpl::heartbeat() {
  const auto& options = extended_.options();
  const auto period = std::clamp<std::chrono::milliseconds>(
      options.coordinator_timeout / 4, std::chrono::milliseconds(50), std::chrono::seconds(5));
  std::vector<PendingPing> worker_pings(workers_.size()), ps_pings(ps_stubs_.size());
  while (sleep_for(period)) {
    for (size_t i = 0; i < workers_.size(); ++i) {
      const auto status = worker_pings[i].poll(workers_[i].stub.get(), options.rpc_timeout);
      if (!status) continue;
      if (status->ok()) {
        std::lock_guard<std::mutex> lock(mutex_);
        worker_heard_from_[i] = true;
      } else if (worker_pings[i].failures == 2) {  // once per silence
        lose_stalled_worker(i, *status);
      }
    }
    for (size_t j = 0; j < ps_stubs_.size(); ++j) {
      const auto status = ps_pings[j].poll(ps_stubs_[j].get(), options.rpc_timeout);
      // Twice in a row: a ps task that just restarted its connection gets one more chance.
      if (status && ps_pings[j].failures >= 2) lose_parameter_server(j, *status);
    }
    fail_if_no_worker_answers();
  }
}

void CoordinatorImpl::lose_parameter_server(size_t index, const grpc::Status& status) {
  const TaskSpec task{"ps", static_cast<int>(index)};
  fail_job(std::make_exception_ptr(CollectiveError(concat(
      "parameter server ", task.name(), " (", extended_.config().cluster.address(task).to_string(),
      ") is lost: it failed two pings in a row (each may take ",
      extended_.options().rpc_timeout.count(), " ms; ", status.error_message(),
      "); the variables it held are gone: restart the job, which resumes from its last "
      "checkpoint"))));
}

void CoordinatorImpl::fail_if_no_worker_answers() {
  const auto& options = extended_.options();
  std::string silent_workers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const bool any_up = std::find(worker_up_.begin(), worker_up_.end(), true) != worker_up_.end();
    if (any_up || queue_.empty()) {
      some_worker_up_at_ = Clock::now();
    } else if (Clock::now() - some_worker_up_at_ > options.startup_timeout && !job_error_) {
      for (const auto& worker : workers_)
        silent_workers += (silent_workers.empty() ? "" : ", ") + worker.describe();
    }
  }
  if (!silent_workers.empty())
    fail_job(std::make_exception_ptr(CollectiveError(concat(
        "no worker has answered for ", options.startup_timeout.count(), " ms (", silent_workers,
        "); steps are waiting: start the workers, or check their addresses in TF_CONFIG"))));
}

// A worker that is up but failed two heartbeat pings in a row (stopped with SIGSTOP, frozen,
// its network gone) is lost like a killed one: its running step is cancelled, so it runs again on
// another worker now rather than after step_timeout, and it gets steps again once it answers.
void CoordinatorImpl::lose_stalled_worker(size_t index, const grpc::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || job_error_ || !worker_up_[index]) return;
    worker_up_[index] = false;
    if (running_[index]) running_[index]->TryCancel();
  }
  log(concat(workers_[index].describe(), " failed two pings in a row (", status.error_message(),
             "): taken as lost until it answers again"));
}

void CoordinatorImpl::fail_job(std::exception_ptr error) {
  std::deque<std::shared_ptr<Call>> queued;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (job_error_) return;
    job_error_ = error;
    queued.swap(queue_);
    unfinished_ -= static_cast<int64_t>(queued.size());
    // Steps running on workers end too (as failed by the job's error), so that no one waits for
    // a result that a stalled worker would hold until step_timeout.
    for (auto& context : running_)
      if (context) context->TryCancel();
    changed_.notify_all();
  }
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    log(e.what());
  }
  for (const auto& call : queued) call->state->finish({}, error);
}

void CoordinatorImpl::rethrow_errors() {
  if (job_error_) std::rethrow_exception(job_error_);
  if (first_call_error_) {
    std::exception_ptr error = first_call_error_;
    first_call_error_ = nullptr;
    std::rethrow_exception(error);
  }
}

void CoordinatorImpl::join() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return unfinished_ == 0 || job_error_; });
  rethrow_errors();
}

bool CoordinatorImpl::done() {
  std::lock_guard<std::mutex> lock(mutex_);
  rethrow_errors();
  return unfinished_ == 0;
}

void CoordinatorImpl::shutdown() {
  std::deque<std::shared_ptr<Call>> queued;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shut_down_) return;
    shut_down_ = true;
    stopping_ = true;
    for (auto& context : running_)
      if (context) context->TryCancel();
    queued.swap(queue_);
    changed_.notify_all();
  }
  for (auto& thread : threads_) thread.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  for (const auto& call : queued) finish_call(*call, {}, shut_down_error());
  if (!chief_) return;
  // Every other task exits now instead of at its coordinator timeout. A worker never heard
  // from may still be starting (a job of few steps can end before it serves): the call waits a
  // while for it to serve, so that it too exits at once, and with 0, instead of at its timeout.
  rpc::PingRequest request;
  request.set_from(ps::kCoordinatorTask);
  std::vector<std::future<void>> calls;
  // Not after a failure (the silent workers may be why), and not past the time they had to
  // start in.
  const auto deadline = std::chrono::milliseconds(2000);
  const auto start_left = std::chrono::duration_cast<std::chrono::milliseconds>(
      started_at_ + extended_.options().startup_timeout - Clock::now());
  const auto starting_deadline =
      std::min<std::chrono::milliseconds>(start_left, std::chrono::seconds(15));
  const bool wait_for_starting = !job_error_ && starting_deadline > deadline;
  for (size_t i = 0; i < workers_.size(); ++i) {
    // The threads are joined: no lock needed.
    const bool starting = wait_for_starting && !worker_heard_from_[i];
    calls.push_back(std::async(std::launch::async, [&, w = &workers_[i], starting] {
      auto context = ps::context_with_deadline(starting ? starting_deadline : deadline);
      context->set_wait_for_ready(starting);
      rpc::PingResponse response;
      w->stub->Shutdown(context.get(), request, &response);
    }));
  }
  for (auto& stub : ps_stubs_)
    calls.push_back(std::async(std::launch::async, [&, s = stub.get()] {
      rpc::PingResponse response;
      s->Shutdown(ps::context_with_deadline(deadline).get(), request, &response);
    }));
  for (auto& call : calls) call.wait();
}

}  // namespace dist::detail
