#include "ps/ps_service.h"

#include <ATen/ATen.h>
#include <torch/optim/adagrad.h>

#include "core/optimizer_kinds.h"
#include "distribute/step/optimizer_slots.h"
#include "ps/rpc_status.h"
#include "ps/tensor_codec.h"

namespace dist::ps {
namespace {

const detail::OptimizerKind& kind_named(const std::string& kind) {
  const detail::OptimizerKind* found = detail::find_optimizer_kind(kind);
  if (found == nullptr)
    throw InvalidArgument(detail::concat("optimizer '", kind, "' cannot run on a ps task; use ",
                                         detail::optimizer_kind_names()));
  return *found;
}

detail::OptimizerOptionValues options_of(const rpc::OptimizerConfig& config) {
  return {config.options().begin(), config.options().end()};
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const detail::OptimizerKind& kind,
                                                        const rpc::OptimizerConfig& config,
                                                        const at::Tensor& value) {
  return kind.make_over({value}, options_of(config));
}

// The name a variable's kind goes by in messages and answers; empty before its first update.
std::string name_of(const detail::OptimizerKind* kind) { return kind ? kind->name : ""; }

// The options of the request, every time: a learning-rate schedule on the coordinator or
// the workers reaches the ps with the next update. `kind`: the variable's (the request's).
void configure(const detail::OptimizerKind& kind, torch::optim::Optimizer& optimizer,
               const rpc::OptimizerConfig& config) {
  kind.write_options(optimizer.param_groups()[0].options(), options_of(config));
}

// An option of the request; 0 when not given (the default of every option sparse updates ask).
double option(const rpc::OptimizerConfig& config, const char* name) {
  auto it = config.options().find(name);
  return it == config.options().end() ? 0.0 : it->second;
}

at::Tensor rows_tensor(const google::protobuf::RepeatedField<int64_t>& rows) {
  return at::tensor(std::vector<int64_t>(rows.begin(), rows.end()), at::kLong);
}

// Row numbers within [0, count), each once: a lookup or an update names them.
void check_rows(const std::string& name, const at::Tensor& rows, int64_t count, bool distinct) {
  if (rows.numel() == 0) return;
  const int64_t low = rows.min().item<int64_t>(), high = rows.max().item<int64_t>();
  if (low < 0 || high >= count)
    throw DataError(detail::concat("variable '", name, "': row ", low < 0 ? low : high,
                                   " is outside its ", count, " rows"));
  if (distinct && std::get<0>(at::_unique(rows)).numel() != rows.numel())
    throw DataError(
        detail::concat("variable '", name, "': a sparse update names a row twice; sum them first"));
}

}  // namespace

ParameterServerService::ParameterServerService(std::string task, TaskLiveness* liveness)
    : task_(std::move(task)), liveness_(liveness) {}

std::shared_ptr<ParameterServerService::Variable> ParameterServerService::find(
    const std::string& name) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  auto it = variables_.find(name);
  if (it == variables_.end())
    throw NotFound(detail::concat("no variable '", name,
                                  "' here (it was never created on this task; a restarted ps "
                                  "task holds none until the coordinator restores them)"));
  return it->second;
}

grpc::Status ParameterServerService::CreateVariable(grpc::ServerContext*,
                                                    const rpc::CreateVariableRequest* request,
                                                    rpc::CreateVariableResponse* response) {
  liveness_->heard_from_coordinator();
  return answer(task_, [&] {
    const std::string& name = request->name();
    DIST_CHECK(!name.empty(), DataError, "a variable's name is empty");
    at::Tensor initial = decode_tensor(request->initial(), "variable '" + name + "'");
    std::unique_lock<std::shared_mutex> lock(mutex_);
    auto it = variables_.find(name);
    if (it != variables_.end()) {
      const at::Tensor& kept = it->second->value;
      DIST_CHECK(kept.sizes() == initial.sizes() && kept.scalar_type() == initial.scalar_type(),
                 DataError, "variable '", name, "' exists with shape ", kept.sizes(), " of ",
                 kept.scalar_type(), ", not ", initial.sizes(), " of ", initial.scalar_type());
      response->set_created(false);
      return;
    }
    auto variable = std::make_shared<Variable>();
    variable->value = initial.set_requires_grad(true);
    variables_[name] = std::move(variable);
    response->set_created(true);
  });
}

grpc::Status ParameterServerService::Read(grpc::ServerContext*, const rpc::ReadRequest* request,
                                          rpc::ReadResponse* response) {
  return answer(task_, [&] {
    for (const auto& name : request->names()) {
      auto variable = find(name);
      std::lock_guard<std::mutex> lock(variable->mutex);
      encode_tensor(variable->value, response->add_values());
    }
  });
}

grpc::Status ParameterServerService::Lookup(grpc::ServerContext*, const rpc::LookupRequest* request,
                                            rpc::LookupResponse* response) {
  return answer(task_, [&] {
    auto variable = find(request->name());
    at::Tensor rows = rows_tensor(request->rows());
    std::lock_guard<std::mutex> lock(variable->mutex);
    DIST_CHECK(variable->value.dim() >= 1, DataError, "variable '", request->name(),
               "' is a scalar; it has no rows to look up");
    check_rows(request->name(), rows, variable->value.size(0), /*distinct=*/false);
    encode_tensor(variable->value.detach().index_select(0, rows), response->mutable_values());
  });
}

void ParameterServerService::apply_dense(Variable& variable, const rpc::OptimizerConfig& config,
                                         const at::Tensor& gradient) {
  variable.value.mutable_grad() = gradient;
  variable.optimizer->step();
  variable.value.mutable_grad().reset();
}

void ParameterServerService::apply_sparse(Variable& variable, const rpc::OptimizerConfig& c,
                                          const at::Tensor& rows, const at::Tensor& values) {
  torch::NoGradGuard no_grad;
  at::Tensor value = variable.value.detach();
  if (c.kind() == "SGD") {
    DIST_CHECK(option(c, "momentum") == 0 && option(c, "weight_decay") == 0, InvalidArgument,
               "sparse updates with SGD take no momentum or weight decay (they would touch "
               "every row); use plain SGD or Adagrad for the table");
    value.index_add_(0, rows, values, -option(c, "lr"));  // the rows of p.add_(g, -lr)
    return;
  }
  DIST_CHECK(c.kind() == "Adagrad" && option(c, "weight_decay") == 0 && option(c, "lr_decay") == 0,
             InvalidArgument, "sparse updates take SGD or Adagrad (no weight or rate decay); got ",
             c.kind());
  // Adagrad on the rows only, as LibTorch's dense step computes each element.
  auto& state = variable.optimizer->state();
  const std::string key = detail::state_key_of(variable.value);
  if (state.find(key) == state.end()) {
    auto fresh = std::make_unique<torch::optim::AdagradParamState>();
    fresh->step(0);
    fresh->sum(at::full_like(value, option(c, "initial_accumulator_value")));
    state[key] = std::move(fresh);
  }
  auto& slots = static_cast<torch::optim::AdagradParamState&>(*state[key]);
  slots.step(slots.step() + 1);
  at::Tensor sum_rows = slots.sum().index_select(0, rows).addcmul_(values, values, 1);
  slots.sum().index_copy_(0, rows, sum_rows);
  at::Tensor std_rows = sum_rows.sqrt().add_(option(c, "eps"));
  at::Tensor new_rows = value.index_select(0, rows).addcdiv_(values, std_rows, -option(c, "lr"));
  value.index_copy_(0, rows, new_rows);
}

grpc::Status ParameterServerService::ApplyGradients(grpc::ServerContext*,
                                                    const rpc::ApplyGradientsRequest* request,
                                                    rpc::ApplyGradientsResponse* response) {
  return answer(task_, [&] {
    // Everything is decoded and checked before any variable changes.
    struct Update {
      std::shared_ptr<Variable> variable;
      at::Tensor rows, values;  // rows undefined: dense
    };
    std::vector<Update> updates;
    for (const auto& dense : request->dense()) {
      auto variable = find(dense.name());
      at::Tensor g = decode_tensor(dense.gradient(), "gradient of '" + dense.name() + "'");
      DIST_CHECK(
          g.sizes() == variable->value.sizes() && g.scalar_type() == variable->value.scalar_type(),
          DataError, "gradient of '", dense.name(), "': shape ", g.sizes(), " of ", g.scalar_type(),
          " for a variable of shape ", variable->value.sizes(), " of ",
          variable->value.scalar_type());
      updates.push_back({std::move(variable), at::Tensor(), std::move(g)});
    }
    for (const auto& sparse : request->sparse()) {
      auto variable = find(sparse.name());
      const std::string what = "sparse gradient of '" + sparse.name() + "'";
      at::Tensor values = decode_tensor(sparse.values(), what);
      at::Tensor rows = rows_tensor(sparse.rows());
      const at::Tensor& v = variable->value;
      DIST_CHECK(v.dim() >= 1 && values.dim() == v.dim() && values.size(0) == rows.numel() &&
                     values.sizes().slice(1) == v.sizes().slice(1) &&
                     values.scalar_type() == v.scalar_type(),
                 DataError, what, ": values of shape ", values.sizes(), " for ", rows.numel(),
                 " rows of a variable of shape ", v.sizes(), " of ", v.scalar_type());
      check_rows(sparse.name(), rows, v.size(0), /*distinct=*/true);
      updates.push_back({std::move(variable), std::move(rows), std::move(values)});
    }
    int64_t most = 0;
    for (auto& u : updates) {
      std::lock_guard<std::mutex> lock(u.variable->mutex);
      Variable& variable = *u.variable;
      if (!variable.optimizer) {  // its kind is found here, once
        const detail::OptimizerKind& kind = kind_named(request->optimizer().kind());
        variable.optimizer = make_optimizer(kind, request->optimizer(), variable.value);
        variable.kind = &kind;
      }
      DIST_CHECK(variable.kind->name == request->optimizer().kind(), InvalidArgument,
                 "a variable here is updated by ", variable.kind->name, ", not by ",
                 request->optimizer().kind(), "; one optimizer per variable");
      configure(*variable.kind, *variable.optimizer, request->optimizer());
      if (u.rows.defined())
        apply_sparse(variable, request->optimizer(), u.rows, u.values);
      else
        apply_dense(variable, request->optimizer(), u.values);
      most = std::max(most, ++variable.updates);
    }
    response->set_updates(most);
  });
}

grpc::Status ParameterServerService::Assign(grpc::ServerContext*, const rpc::AssignRequest* request,
                                            rpc::AssignResponse*) {
  liveness_->heard_from_coordinator();
  return answer(task_, [&] {
    auto variable = find(request->name());
    at::Tensor value = decode_tensor(request->value(), "value of '" + request->name() + "'");
    std::lock_guard<std::mutex> lock(variable->mutex);
    DIST_CHECK(value.sizes() == variable->value.sizes() &&
                   value.scalar_type() == variable->value.scalar_type(),
               DataError, "value of '", request->name(), "': shape ", value.sizes(),
               " for a variable of shape ", variable->value.sizes());
    // Everything is checked before the variable changes; a new optimizer is made aside.
    detail::ParameterSlots slots;
    std::unique_ptr<torch::optim::Optimizer> made;
    const detail::OptimizerKind* made_kind = nullptr;
    const std::string& kind = request->optimizer().kind();
    if (request->slots_size() > 0) {
      if (!variable->optimizer) {
        DIST_CHECK(!kind.empty(), InvalidArgument, "variable '", request->name(),
                   "' has no optimizer yet to take slots, and the request names none");
        made_kind = &kind_named(kind);  // its kind is found here, once
        made = make_optimizer(*made_kind, request->optimizer(), variable->value);
      }
      DIST_CHECK(made || kind.empty() || kind == name_of(variable->kind), InvalidArgument,
                 "slots of ", kind, " for variable '", request->name(), "', which is updated by ",
                 name_of(variable->kind));
      std::map<std::string, at::Tensor> named;
      for (const auto& [slot, t] : request->slots())
        named[slot] = decode_tensor(t, "slot '" + slot + "' of '" + request->name() + "'");
      slots.emplace_back(variable->value.unsafeGetTensorImpl(), std::move(named));
      detail::check_slots(
          made ? detail::OptimizerWithKind(*made, made_kind)
               : detail::OptimizerWithKind(*variable->optimizer, variable->kind),
          slots, [&](const void*) { return request->name(); },
          [](const std::string& message) { throw DataError(message); });
    }
    torch::NoGradGuard no_grad;
    variable->value.detach().copy_(value);
    if (!slots.empty()) {
      if (made) {
        variable->optimizer = std::move(made);
        variable->kind = made_kind;
      }
      if (!kind.empty()) configure(*variable->kind, *variable->optimizer, request->optimizer());
      detail::import_slots({*variable->optimizer, variable->kind}, slots);
      variable->updates = request->optimizer_steps();
    }
  });
}

grpc::Status ParameterServerService::ReadSlots(grpc::ServerContext*,
                                               const rpc::ReadSlotsRequest* request,
                                               rpc::ReadSlotsResponse* response) {
  return answer(task_, [&] {
    auto variable = find(request->name());
    std::lock_guard<std::mutex> lock(variable->mutex);
    response->set_kind(name_of(variable->kind));
    if (!variable->optimizer) return;
    for (const auto& [impl, slots] : detail::export_slots({*variable->optimizer, variable->kind}))
      for (const auto& [slot, t] : slots) encode_tensor(t, &(*response->mutable_slots())[slot]);
    response->set_optimizer_steps(variable->updates);
  });
}

grpc::Status ParameterServerService::Ping(grpc::ServerContext*, const rpc::PingRequest* request,
                                          rpc::PingResponse* response) {
  return answer_ping(*liveness_, task_, *request, response);
}

grpc::Status ParameterServerService::Shutdown(grpc::ServerContext*, const rpc::PingRequest*,
                                              rpc::PingResponse* response) {
  return answer_shutdown(*liveness_, task_, response);
}

}  // namespace dist::ps
