#include "ps/worker_service.h"

#include "dist/core/error.h"
#include "ps/rpc_status.h"
#include "ps/tensor_codec.h"

namespace dist::ps {

WorkerService::WorkerService(std::string task, int worker_index, InputContext input,
                             std::shared_ptr<detail::StepRegistry> registry, TaskLiveness* liveness)
    : task_(std::move(task)),
      worker_index_(worker_index),
      input_(input),
      registry_(std::move(registry)),
      liveness_(liveness) {}

data::Iterator& WorkerService::iterator(int64_t id, int64_t epoch) {
  auto dataset = datasets_.find(id);
  if (dataset == datasets_.end()) {
    detail::StepRegistry::DatasetFunction make;
    {
      std::lock_guard<std::mutex> lock(registry_->mutex);
      if (id < 0 || id >= static_cast<int64_t>(registry_->datasets.size()))
        throw NotFound(detail::concat("per-worker dataset ", id,
                                      " is not made here; create_per_worker_dataset must be "
                                      "called on every task, in the same order"));
      make = registry_->datasets[static_cast<size_t>(id)];
    }
    dataset = datasets_.emplace(id, make(input_)).first;
  }
  auto& [pass, it] = iterators_[id];
  if (!it || pass != epoch) {
    it.emplace(dataset->second.iterator(epoch));
    pass = epoch;
  }
  return *it;
}

grpc::Status WorkerService::Run(grpc::ServerContext*, const rpc::RunRequest* request,
                                rpc::RunResponse* response) {
  liveness_->heard_from_coordinator();
  return answer(task_, [&] {
    std::lock_guard<std::mutex> lock(run_mutex_);
    detail::StepRegistry::Function function;
    {
      std::lock_guard<std::mutex> registry_lock(registry_->mutex);
      auto it = registry_->functions.find(request->function());
      if (it == registry_->functions.end())
        throw NotFound(detail::concat("no step function '", request->function(),
                                      "' is registered here; register_function must be called "
                                      "on every task with the same names"));
      function = it->second;
    }
    std::vector<at::Tensor> arguments;
    for (int i = 0; i < request->arguments_size(); ++i)
      arguments.push_back(
          decode_tensor(request->arguments(i),
                        detail::concat("argument ", i, " of '", request->function(), "'")));
    std::function<data::Element()> next;
    if (request->dataset() >= 0) {
      data::Iterator* it = &iterator(request->dataset(), request->epoch());
      next = [it, dataset = request->dataset(), epoch = request->epoch(), this] {
        auto element = it->next();
        if (!element)
          throw OutOfRange(detail::concat("the iterator of ", task_, " over per-worker dataset ",
                                          dataset, " (pass ", epoch,
                                          ") is exhausted; schedule fewer steps per pass"));
        return std::move(*element);
      };
    } else {
      next = [name = request->function()]() -> data::Element {
        throw InvalidArgument(detail::concat("step '", name,
                                             "' asked for data but was scheduled without a "
                                             "per-worker dataset's iterator"));
      };
    }
    ScheduledCall call;
    detail::ScheduledCallAccess::set(call, std::move(next), std::move(arguments), worker_index_);
    for (auto& [key, value] : function(call)) {
      response->add_keys(key);
      encode_tensor(value.detach(), response->add_results());
    }
  });
}

grpc::Status WorkerService::Ping(grpc::ServerContext*, const rpc::PingRequest* request,
                                 rpc::PingResponse* response) {
  return answer_ping(*liveness_, task_, *request, response);
}

grpc::Status WorkerService::Shutdown(grpc::ServerContext*, const rpc::PingRequest*,
                                     rpc::PingResponse* response) {
  return answer_shutdown(*liveness_, task_, response);
}

}  // namespace dist::ps
