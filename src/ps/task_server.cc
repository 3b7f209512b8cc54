#include "ps/task_server.h"

#include <chrono>

#include "dist/core/error.h"

namespace dist::ps {

TaskServer::TaskServer(const std::string& task, const std::string& address,
                       const std::vector<grpc::Service*>& services) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  // Only this address: SO_REUSEPORT would let a second process bind it too and split the calls.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (grpc::Service* service : services) builder.RegisterService(service);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0)
    throw CollectiveError(detail::concat(task, ": cannot serve on ", address,
                                         " (in use, or not an address of this host); check its "
                                         "entry in TF_CONFIG"));
}

TaskServer::~TaskServer() {
  // Calls in flight get a moment to finish; then they are cancelled.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
}

std::unique_ptr<grpc::ClientContext> context_with_deadline(std::chrono::milliseconds deadline) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + deadline);
  return context;
}

std::shared_ptr<grpc::Channel> open_channel(const std::string& address) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);
  arguments.SetMaxSendMessageSize(-1);
  // Reconnect quickly to a task that comes back (the default backoff grows to 2 minutes).
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), arguments);
}

}  // namespace dist::ps
