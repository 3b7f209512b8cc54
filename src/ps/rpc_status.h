// Library errors as gRPC statuses (server side) and statuses as library errors (client side),
// so a bad request is answered with a named error and the server keeps serving.
#pragma once

#include <exception>
#include <string>

#include <grpcpp/grpcpp.h>

#include "dist/core/error.h"
#include "ps/parameter_server.pb.h"
#include "ps/task_liveness.h"

namespace dist::ps {

// A request named a variable (or function, dataset) the server does not have.
class NotFound : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// Runs `body`; its exception becomes the status: NotFound -> NOT_FOUND, OutOfRange ->
// OUT_OF_RANGE, DataError and
// InvalidArgument -> INVALID_ARGUMENT, anything else -> INTERNAL. Every message starts with
// `task`.
template <class F>
grpc::Status answer(const std::string& task, F&& body) {
  try {
    body();
    return grpc::Status::OK;
  } catch (const NotFound& e) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, task + ": " + e.what());
  } catch (const OutOfRange& e) {
    return grpc::Status(grpc::StatusCode::OUT_OF_RANGE, task + ": " + e.what());
  } catch (const DataError& e) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, task + ": " + e.what());
  } catch (const InvalidArgument& e) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, task + ": " + e.what());
  } catch (const std::exception& e) {
    return grpc::Status(grpc::StatusCode::INTERNAL, task + ": " + e.what());
  }
}

// The Ping and Shutdown answers every task's service gives: `task` names it; a ping from the
// coordinator counts as hearing from it, a Shutdown ends the task's serve().
inline grpc::Status answer_ping(TaskLiveness& liveness, const std::string& task,
                                const rpc::PingRequest& request, rpc::PingResponse* response) {
  if (request.from() == kCoordinatorTask) liveness.heard_from_coordinator();
  response->set_task(task);
  return grpc::Status::OK;
}
inline grpc::Status answer_shutdown(TaskLiveness& liveness, const std::string& task,
                                    rpc::PingResponse* response) {
  response->set_task(task);
  liveness.shutdown();
  return grpc::Status::OK;
}

// Whether the peer could not be reached or did not answer in time (the task is lost), as
// opposed to answering with an error.
inline bool is_unreachable(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         status.error_code() == grpc::StatusCode::CANCELLED;
}

}  // namespace dist::ps
