// Library errors as gRPC statuses (server side) and statuses as library errors (client side),
// so a bad request is answered with a named error and the server keeps serving.
#pragma once

#include <exception>
#include <string>

#include <grpcpp/grpcpp.h>

#include "dist/core/error.h"

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

// Whether the peer could not be reached or did not answer in time (the task is lost), as
// opposed to answering with an error.
inline bool is_unreachable(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         status.error_code() == grpc::StatusCode::CANCELLED;
}

}  // namespace dist::ps
