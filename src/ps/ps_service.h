// The service of a ps task: it holds variables (or shards of them) and their optimizer slots,
// answers reads and row lookups, and applies the gradients workers send with LibTorch's own
// optimizers, so an update here is the update a local optimizer would make.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>

#include <grpcpp/grpcpp.h>
#include <torch/optim/optimizer.h>

#include "ps/parameter_server.grpc.pb.h"
#include "ps/task_liveness.h"

namespace dist::detail {
struct OptimizerKind;  // core/optimizer_kinds.h
}  // namespace dist::detail

namespace dist::ps {

class ParameterServerService final : public rpc::ParameterServer::Service {
 public:
  // `task` names this server in errors ("ps:0 (127.0.0.1:2222)"); `liveness` is told of every
  // call from the coordinator and of a Shutdown.
  ParameterServerService(std::string task, TaskLiveness* liveness);

  grpc::Status CreateVariable(grpc::ServerContext*, const rpc::CreateVariableRequest* request,
                              rpc::CreateVariableResponse* response) override;
  grpc::Status Read(grpc::ServerContext*, const rpc::ReadRequest* request,
                    rpc::ReadResponse* response) override;
  grpc::Status Lookup(grpc::ServerContext*, const rpc::LookupRequest* request,
                      rpc::LookupResponse* response) override;
  grpc::Status ApplyGradients(grpc::ServerContext*, const rpc::ApplyGradientsRequest* request,
                              rpc::ApplyGradientsResponse* response) override;
  grpc::Status Assign(grpc::ServerContext*, const rpc::AssignRequest* request,
                      rpc::AssignResponse* response) override;
  grpc::Status ReadSlots(grpc::ServerContext*, const rpc::ReadSlotsRequest* request,
                         rpc::ReadSlotsResponse* response) override;
  grpc::Status Ping(grpc::ServerContext*, const rpc::PingRequest* request,
                    rpc::PingResponse* response) override;
  grpc::Status Shutdown(grpc::ServerContext*, const rpc::PingRequest* request,
                        rpc::PingResponse* response) override;

 private:
  struct Variable {
    std::mutex mutex;
    at::Tensor value;  // a leaf that "requires grad", so LibTorch's optimizers update it
    std::unique_ptr<torch::optim::Optimizer> optimizer;  // made by the first update
    const detail::OptimizerKind* kind = nullptr;         // the optimizer's, found once by name
    int64_t updates = 0;
  };
  std::shared_ptr<Variable> find(const std::string& name) const;  // NotFound if absent
  void apply_dense(Variable& variable, const rpc::OptimizerConfig& config, const at::Tensor& g);
  void apply_sparse(Variable& variable, const rpc::OptimizerConfig& config, const at::Tensor& rows,
                    const at::Tensor& values);

  const std::string task_;
  TaskLiveness* liveness_;
  mutable std::shared_mutex mutex_;  // guards the map; each Variable has its own mutex
  std::map<std::string, std::shared_ptr<Variable>> variables_;
};

}  // namespace dist::ps
