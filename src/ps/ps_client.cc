#include "ps/ps_client.h"

#include <future>
#include <map>
#include <thread>

#include <ATen/ATen.h>

#include "dist/core/error.h"
#include "ps/rpc_status.h"
#include "ps/task_server.h"
#include "ps/tensor_codec.h"

namespace dist::ps {

std::vector<std::string> PlacedVariable::shard_names() const {
  if (ps.size() == 1) return {name};
  std::vector<std::string> names;
  for (size_t i = 0; i < ps.size(); ++i) names.push_back(name + "/part_" + std::to_string(i));
  return names;
}

ParameterServers::ParameterServers(std::vector<Task> tasks, std::chrono::milliseconds timeout)
    : tasks_(std::move(tasks)), timeout_(timeout) {
  DIST_CHECK_ARG(!tasks_.empty(),
                 "ParameterServerStrategy: the cluster has no ps task; add a "
                 "\"ps\" list to TF_CONFIG's cluster");
  for (const auto& task : tasks_)
    stubs_.push_back(rpc::ParameterServer::NewStub(open_channel(task.address)));
}

std::unique_ptr<grpc::ClientContext> ParameterServers::context() const {
  return context_with_deadline(timeout_);
}

void ParameterServers::check(const grpc::Status& status, int ps, const std::string& what) const {
  if (status.ok()) return;
  const Task& t = task(ps);
  if (is_unreachable(status))
    throw CollectiveError(
        detail::concat("parameter server ", t.describe(), " is lost: ", what,
                       " got no answer within ", timeout_.count(), " ms (", status.error_message(),
                       "); restart the job, which resumes from its last checkpoint"));
  throw CollectiveError(
      detail::concat(what, " failed on ", t.describe(), ": ", status.error_message()));
}

PlacedVariable ParameterServers::place(const std::string& name, const at::Tensor& value,
                                       const Partitioner& partitioner) {
  PlacedVariable placed;
  placed.name = name;
  const int shards = partitioner.num_shards(value.sizes(), value.scalar_type());
  if (shards > 1) placed.rows = Partitioner::shard_rows(value.size(0), shards);
  for (int i = 0; i < shards; ++i) {
    placed.ps.push_back(next_ps_);
    next_ps_ = (next_ps_ + 1) % size();
  }
  return placed;
}

void ParameterServers::wait_until_ready(std::chrono::milliseconds timeout,
                                        const std::string& from) {
  for (int ps = 0; ps < size(); ++ps) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    context.set_wait_for_ready(true);  // until it listens, not only until the first refusal
    rpc::PingRequest request;
    request.set_from(from);
    rpc::PingResponse response;
    const grpc::Status status = stub(ps).Ping(&context, request, &response);
    if (!status.ok())
      throw CollectiveError(detail::concat("parameter server ", task(ps).describe(),
                                           " did not start within ", timeout.count(), " ms (",
                                           status.error_message(),
                                           "); is it running, and is TF_CONFIG the same on every "
                                           "task?"));
  }
}

namespace {

// The shards of `value` along dim 0 (the value itself if not split).
std::vector<at::Tensor> split(const PlacedVariable& variable, const at::Tensor& value) {
  if (variable.rows.empty()) return {value};
  return value.split_with_sizes(variable.rows, 0);
}

}  // namespace

void ParameterServers::create(const PlacedVariable& variable, const at::Tensor& value) {
  const auto names = variable.shard_names();
  const auto parts = split(variable, value);
  for (int i = 0; i < variable.num_shards(); ++i) {
    rpc::CreateVariableRequest request;
    request.set_name(names[static_cast<size_t>(i)]);
    encode_tensor(parts[static_cast<size_t>(i)], request.mutable_initial());
    sent_ += payload_bytes(request.initial());
    rpc::CreateVariableResponse response;
    const int ps = variable.ps[static_cast<size_t>(i)];
    check(stub(ps).CreateVariable(context().get(), request, &response), ps,
          "creating variable '" + request.name() + "'");
  }
}

std::vector<at::Tensor> ParameterServers::read(
    const std::vector<const PlacedVariable*>& variables) {
  // One request per ps task with every shard it holds, sent in parallel.
  std::vector<rpc::ReadRequest> requests(static_cast<size_t>(size()));
  struct Where {
    int ps;
    int index;
  };
  std::vector<std::vector<Where>> where(variables.size());
  for (size_t v = 0; v < variables.size(); ++v) {
    const auto names = variables[v]->shard_names();
    for (int i = 0; i < variables[v]->num_shards(); ++i) {
      const int ps = variables[v]->ps[static_cast<size_t>(i)];
      auto& request = requests[static_cast<size_t>(ps)];
      where[v].push_back({ps, request.names_size()});
      request.add_names(names[static_cast<size_t>(i)]);
    }
  }
  std::vector<rpc::ReadResponse> responses(requests.size());
  std::vector<std::future<void>> calls;
  for (int ps = 0; ps < size(); ++ps) {
    if (requests[static_cast<size_t>(ps)].names_size() == 0) continue;
    calls.push_back(std::async(std::launch::async, [this, ps, &requests, &responses] {
      check(stub(ps).Read(context().get(), requests[static_cast<size_t>(ps)],
                          &responses[static_cast<size_t>(ps)]),
            ps, "reading variables");
    }));
  }
  for (auto& call : calls) call.get();
  std::vector<at::Tensor> values;
  for (size_t v = 0; v < variables.size(); ++v) {
    std::vector<at::Tensor> parts;
    for (const Where& w : where[v]) {
      const auto& message = responses[static_cast<size_t>(w.ps)].values(w.index);
      received_ += payload_bytes(message);
      parts.push_back(decode_tensor(message, "variable '" + variables[v]->name + "'"));
    }
    values.push_back(parts.size() == 1 ? parts[0] : at::cat(parts, 0));
  }
  return values;
}

at::Tensor ParameterServers::lookup(const PlacedVariable& variable, const at::Tensor& ids) {
  // Each shard's rows [start, start + rows): ask it for the ids that fall there, then put the
  // answers back in the order of `ids`.
  const at::Tensor flat = ids.reshape({-1}).to(at::kLong);
  std::vector<at::Tensor> answers;
  std::vector<at::Tensor> positions;
  int64_t start = 0;
  const auto names = variable.shard_names();
  for (int i = 0; i < variable.num_shards(); ++i) {
    const int64_t rows = variable.rows.empty() ? std::numeric_limits<int64_t>::max()
                                               : variable.rows[static_cast<size_t>(i)];
    at::Tensor here = ((flat >= start) & (flat - start < rows)).nonzero().reshape({-1});
    const int ps = variable.ps[static_cast<size_t>(i)];
    if (here.numel() > 0) {
      rpc::LookupRequest request;
      request.set_name(names[static_cast<size_t>(i)]);
      at::Tensor local = flat.index_select(0, here) - start;
      for (int64_t r : std::vector<int64_t>(local.data_ptr<int64_t>(),
                                            local.data_ptr<int64_t>() + local.numel()))
        request.add_rows(r);
      sent_ += 8 * local.numel();
      rpc::LookupResponse response;
      check(stub(ps).Lookup(context().get(), request, &response), ps,
            "looking up rows of '" + request.name() + "'");
      received_ += payload_bytes(response.values());
      answers.push_back(decode_tensor(response.values(), "rows of '" + request.name() + "'"));
      positions.push_back(here);
    }
    if (!variable.rows.empty()) start += rows;
  }
  DIST_CHECK_ARG(!answers.empty() || flat.numel() == 0, "lookup of '", variable.name,
                 "': no row asked for");
  at::Tensor all = at::cat(answers, 0);
  at::Tensor order = at::cat(positions, 0);
  at::Tensor out = at::empty_like(all);
  out.index_copy_(0, order, all);
  auto shape = ids.sizes().vec();
  for (int64_t d : all.sizes().slice(1)) shape.push_back(d);
  return out.reshape(shape);
}

void ParameterServers::apply(const rpc::OptimizerConfig& optimizer,
                             const std::vector<std::pair<const PlacedVariable*, at::Tensor>>& dense,
                             const std::vector<std::pair<const PlacedVariable*, Sparse>>& sparse) {
  std::vector<rpc::ApplyGradientsRequest> requests(static_cast<size_t>(size()));
  for (auto& request : requests) *request.mutable_optimizer() = optimizer;
  for (const auto& [variable, gradient] : dense) {
    const auto names = variable->shard_names();
    const auto parts = split(*variable, gradient);
    for (int i = 0; i < variable->num_shards(); ++i) {
      auto* entry = requests[static_cast<size_t>(variable->ps[static_cast<size_t>(i)])].add_dense();
      entry->set_name(names[static_cast<size_t>(i)]);
      encode_tensor(parts[static_cast<size_t>(i)], entry->mutable_gradient());
      sent_ += payload_bytes(entry->gradient());
    }
  }
  for (const auto& [variable, update] : sparse) {
    const auto names = variable->shard_names();
    int64_t start = 0;
    for (int i = 0; i < variable->num_shards(); ++i) {
      const int64_t rows = variable->rows.empty() ? std::numeric_limits<int64_t>::max()
                                                  : variable->rows[static_cast<size_t>(i)];
      at::Tensor here =
          ((update.rows >= start) & (update.rows - start < rows)).nonzero().reshape({-1});
      if (here.numel() > 0) {
        auto* entry =
            requests[static_cast<size_t>(variable->ps[static_cast<size_t>(i)])].add_sparse();
        entry->set_name(names[static_cast<size_t>(i)]);
        at::Tensor local = update.rows.index_select(0, here) - start;
        for (int64_t j = 0; j < local.numel(); ++j) entry->add_rows(local[j].item<int64_t>());
        encode_tensor(update.values.index_select(0, here), entry->mutable_values());
        sent_ += payload_bytes(entry->values()) + 8 * local.numel();
      }
      if (!variable->rows.empty()) start += rows;
    }
  }
  std::vector<std::future<void>> calls;
  for (int ps = 0; ps < size(); ++ps) {
    const auto& request = requests[static_cast<size_t>(ps)];
    if (request.dense_size() == 0 && request.sparse_size() == 0) continue;
    calls.push_back(std::async(std::launch::async, [this, ps, &request] {
      rpc::ApplyGradientsResponse response;
      check(stub(ps).ApplyGradients(context().get(), request, &response), ps, "applying gradients");
    }));
  }
  for (auto& call : calls) call.get();
}

void ParameterServers::assign(const PlacedVariable& variable, const at::Tensor& value) {
  assign(variable, value, Slots{}, rpc::OptimizerConfig());
}

ParameterServers::Slots ParameterServers::read_slots(const PlacedVariable& variable,
                                                     const FreshSlot& fresh) {
  const auto names = variable.shard_names();
  // Each shard's slots; a shard no update has reached yet (a sparse update touches only the
  // shards its rows fall in) has none.
  std::vector<std::map<std::string, at::Tensor>> shards(names.size());
  Slots slots;
  for (int i = 0; i < variable.num_shards(); ++i) {
    rpc::ReadSlotsRequest request;
    request.set_name(names[static_cast<size_t>(i)]);
    rpc::ReadSlotsResponse response;
    const int ps = variable.ps[static_cast<size_t>(i)];
    check(stub(ps).ReadSlots(context().get(), request, &response), ps,
          "reading the optimizer slots of '" + request.name() + "'");
    if (slots.kind.empty()) slots.kind = response.kind();
    slots.optimizer_steps = std::max(slots.optimizer_steps, response.optimizer_steps());
    for (const auto& [slot, message] : response.slots()) {
      received_ += payload_bytes(message);
      shards[static_cast<size_t>(i)][slot] =
          decode_tensor(message, "slot '" + slot + "' of '" + request.name() + "'");
    }
  }
  std::map<std::string, at::Tensor> like;  // each slot as some shard has it
  for (const auto& shard : shards)
    for (const auto& [slot, tensor] : shard) like.emplace(slot, tensor);
  for (const auto& [slot, example] : like) {
    if (example.dim() == 0 || shards.size() == 1) {  // a counter, or a variable in one piece
      slots.tensors[slot] = example;
      continue;
    }
    std::vector<at::Tensor> parts;
    for (size_t i = 0; i < shards.size(); ++i) {
      auto found = shards[i].find(slot);
      parts.push_back(found != shards[i].end() ? found->second
                                               : fresh(slot, example, variable.rows[i]));
    }
    slots.tensors[slot] = at::cat(parts, 0);
  }
  return slots;
}

void ParameterServers::assign(const PlacedVariable& variable, const at::Tensor& value,
                              const Slots& slots, const rpc::OptimizerConfig& optimizer) {
  const auto names = variable.shard_names();
  const auto parts = split(variable, value);
  for (int i = 0; i < variable.num_shards(); ++i) {
    rpc::AssignRequest request;
    request.set_name(names[static_cast<size_t>(i)]);
    encode_tensor(parts[static_cast<size_t>(i)], request.mutable_value());
    sent_ += payload_bytes(request.value());
    for (const auto& [slot, tensor] : slots.tensors) {
      // A slot shaped like the variable is split like it; a scalar goes to every shard.
      const bool per_row = tensor.dim() > 0 && tensor.sizes() == value.sizes();
      const at::Tensor part = per_row ? split(variable, tensor)[static_cast<size_t>(i)] : tensor;
      auto& message = (*request.mutable_slots())[slot];
      encode_tensor(part.contiguous(), &message);
      sent_ += payload_bytes(message);
    }
    request.set_optimizer_steps(slots.optimizer_steps);
    *request.mutable_optimizer() = optimizer;
    rpc::AssignResponse response;
    const int ps = variable.ps[static_cast<size_t>(i)];
    check(stub(ps).Assign(context().get(), request, &response), ps,
          "assigning variable '" + request.name() + "'");
  }
}

void ParameterServers::shutdown_all(const std::string& from) {
  for (int ps = 0; ps < size(); ++ps) {
    rpc::PingRequest request;
    request.set_from(from);
    rpc::PingResponse response;
    stub(ps).Shutdown(context().get(), request, &response);  // a lost ps is already gone
  }
}

}  // namespace dist::ps
