// The ClusterCoordinator's machinery. On the chief: a queue of scheduled calls, one thread per
// worker that hands it calls (and, while the worker is lost, pings it until it is back), and a
// heartbeat that keeps the other tasks alive and notices a lost ps task. On ps and worker
// tasks: the server that serves until a Shutdown or until the coordinator falls silent.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/distribute/cluster_coordinator.h"
#include "ps/parameter_server.grpc.pb.h"
#include "ps/parameter_server_extended.h"
#include "ps/step_registry.h"

namespace dist::detail {

namespace rpc = ps::rpc;

struct RemoteState {
  std::mutex mutex;
  std::condition_variable ready_changed;
  bool ready = false;
  std::exception_ptr error;
  StepRegistry::Results results;

  void finish(StepRegistry::Results values, std::exception_ptr failure);
  void wait();
};

class CoordinatorImpl {
 public:
  CoordinatorImpl(Strategy strategy, ParameterServerExtended& extended);
  ~CoordinatorImpl();

  StepRegistry& registry() { return *registry_; }
  int64_t add_dataset(StepRegistry::DatasetFunction function);
  int serve();
  RemoteValue schedule(const std::string& function, int64_t dataset, int64_t epoch,
                       std::vector<at::Tensor> arguments);
  void join();
  bool done();
  void shutdown();

 private:
  struct Call {
    rpc::RunRequest request;
    std::shared_ptr<RemoteState> state;
  };
  struct WorkerTask {
    std::string name;     // "worker:1"
    std::string address;  // "127.0.0.1:2223"
    std::unique_ptr<rpc::Worker::Stub> stub;
    std::string describe() const { return name + " (" + address + ")"; }
  };
  void start_workers();  // on the first schedule
  // One thread per worker: takes queued calls and runs them on it while it is up.
  void run_worker(size_t index);
  enum class Reach { kUp, kDown, kStopping };
  // Whether worker `index` is up, pinging it if it was lost (then it is marked up again).
  Reach reach_worker(size_t index, bool lost_before);
  // The next queued call, running on worker `index` under `*context`; null once stopping.
  std::shared_ptr<Call> take_call(size_t index, std::shared_ptr<grpc::ClientContext>* context);
  void finish_with_response(const Call& call, const rpc::RunResponse& response);
  // The worker running `call` is lost: the call goes back to the queue's front (or fails with
  // the job's error).
  void run_elsewhere(size_t index, const std::shared_ptr<Call>& call, const grpc::Status& status);
  void heartbeat();
  bool ping_worker(WorkerTask& worker, std::chrono::milliseconds deadline);
  // A lost ps task (or no worker for too long): every call still queued fails with `error`,
  // and join() and schedule() throw it from now on.
  void lose_stalled_worker(size_t index, const grpc::Status& status);
  void lose_parameter_server(size_t index, const grpc::Status& status);
  void fail_if_no_worker_answers();
  void fail_job(std::exception_ptr error);
  void rethrow_errors();  // with mutex_ held
  void finish_call(const Call& call, StepRegistry::Results values, std::exception_ptr error);
  // Waits up to `period` or until shutdown; false once shutting down.
  bool sleep_for(std::chrono::milliseconds period);

  Strategy strategy_;
  ParameterServerExtended& extended_;
  std::shared_ptr<StepRegistry> registry_;
  const bool chief_;

  std::vector<WorkerTask> workers_;
  std::vector<std::unique_ptr<rpc::ParameterServer::Stub>> ps_stubs_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Call>> queue_;
  int64_t unfinished_ = 0;               // scheduled and not yet finished
  std::exception_ptr job_error_;         // fail_job's
  std::exception_ptr first_call_error_;  // a call's own error, rethrown once by join()
  std::vector<std::shared_ptr<grpc::ClientContext>> running_;  // per worker: the call in flight
  std::vector<bool> worker_up_;
  std::vector<bool> worker_heard_from_;  // ever up: shutdown() waits a while for the others
  std::chrono::steady_clock::time_point started_at_;
  std::chrono::steady_clock::time_point some_worker_up_at_;
  bool stopping_ = false;
  bool shut_down_ = false;
  std::vector<std::thread> threads_;
  std::thread heartbeat_;
};

}  // namespace dist::detail
