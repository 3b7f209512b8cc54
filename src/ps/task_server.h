// A gRPC server of one task of the job (a ps or a worker), bound to exactly the address its
// TF_CONFIG entry names, with no limit on message size (a variable can be large).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

namespace dist::ps {

class TaskServer {
 public:
  // CollectiveError naming `task` and `address` if the address cannot be bound.
  TaskServer(const std::string& task, const std::string& address,
             const std::vector<grpc::Service*>& services);
  ~TaskServer();
  TaskServer(const TaskServer&) = delete;
  TaskServer& operator=(const TaskServer&) = delete;

  int port() const { return port_; }

 private:
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// A client context whose call must be answered within `deadline`.
std::unique_ptr<grpc::ClientContext> context_with_deadline(std::chrono::milliseconds deadline);

// A channel to `address` without a message size limit.
std::shared_ptr<grpc::Channel> open_channel(const std::string& address);

}  // namespace dist::ps
