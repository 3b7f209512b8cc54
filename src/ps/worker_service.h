// The service of a worker task: runs the step functions the coordinator schedules by name,
// one at a time, each with the next element of this worker's iterator over a per-worker
// dataset (made on first use, one per pass).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "dist/distribute/input_context.h"
#include "ps/parameter_server.grpc.pb.h"
#include "ps/step_registry.h"
#include "ps/task_liveness.h"

namespace dist::ps {

class WorkerService final : public rpc::Worker::Service {
 public:
  // `task` names this worker in errors ("worker:0 (127.0.0.1:2223)"); `input` is its place
  // among the job's input pipelines.
  WorkerService(std::string task, int worker_index, InputContext input,
                std::shared_ptr<detail::StepRegistry> registry, TaskLiveness* liveness);

  grpc::Status Run(grpc::ServerContext*, const rpc::RunRequest* request,
                   rpc::RunResponse* response) override;
  grpc::Status Ping(grpc::ServerContext*, const rpc::PingRequest* request,
                    rpc::PingResponse* response) override;
  grpc::Status Shutdown(grpc::ServerContext*, const rpc::PingRequest* request,
                        rpc::PingResponse* response) override;

 private:
  // This worker's iterator over pass `epoch` of dataset `id`; older passes are dropped.
  data::Iterator& iterator(int64_t id, int64_t epoch);

  const std::string task_;
  const int worker_index_;
  const InputContext input_;
  std::shared_ptr<detail::StepRegistry> registry_;
  TaskLiveness* liveness_;
  std::mutex run_mutex_;  // one step at a time (a retried call may overlap a hung one)
  std::map<int64_t, data::Dataset> datasets_;
  std::map<int64_t, std::pair<int64_t, std::optional<data::Iterator>>> iterators_;  // id -> pass
};

}  // namespace dist::ps
