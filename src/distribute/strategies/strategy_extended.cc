#include "dist/distribute/strategy_extended.h"

#include <ATen/ATen.h>

#include <cstring>
#include <map>
#include <sstream>

#include "dist/core/error.h"
#include "dist/distribute/batch_split.h"
#include "dist/distribute/replica_context.h"

namespace dist {
namespace {

// Combines values (and along axis); `count` receives the number of values (or of elements
// along axis) that MEAN divides by.
at::Tensor reduce_locally(ReduceOp op, const std::vector<at::Tensor>& values,
                          std::optional<int64_t> axis, int64_t* count) {
  DIST_CHECK_ARG(!values.empty(), "reduce needs at least one value");
  const ReduceOp combine = op == ReduceOp::kMean ? ReduceOp::kSum : op;
  std::vector<at::Tensor> partial;
  *count = 0;
  for (const auto& v : values) {
    if (!axis) {
      partial.push_back(v);
      *count += 1;
      continue;
    }
    // Reduce along the axis within each replica first; MEAN then divides by the total number
    // of elements along the axis, so replicas of unequal size weigh correctly.
    *count += v.size(*axis);
    switch (combine) {
      case ReduceOp::kMin:
        partial.push_back(std::get<0>(v.min(*axis)));
        break;
      case ReduceOp::kMax:
        partial.push_back(std::get<0>(v.max(*axis)));
        break;
      default:
        partial.push_back(v.sum(*axis));
        break;
    }
  }
  at::Tensor stacked = at::stack(partial);
  switch (combine) {
    case ReduceOp::kMin:
      return std::get<0>(stacked.min(0));
    case ReduceOp::kMax:
      return std::get<0>(stacked.max(0));
    default:
      return stacked.sum(0);
  }
}

}  // namespace

namespace {

// "name=value" lines; a newline inside a value would end it early, so it is escaped.
std::string settings_text(const std::vector<std::pair<std::string, std::string>>& settings) {
  std::string text;
  for (const auto& [name, value] : settings) {
    std::string escaped;
    for (char c : value) escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
    text += name + "=" + escaped + "\n";
  }
  return text;
}

std::map<std::string, std::string> parse_settings(const std::string& text,
                                                  std::vector<std::string>* order) {
  std::map<std::string, std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    const std::string name = line.substr(0, eq);
    if (order) order->push_back(name);
    out[name] = eq == std::string::npos ? "" : line.substr(eq + 1);
  }
  return out;
}

}  // namespace

void StrategyExtended::check_workers_agree(
    const std::vector<std::pair<std::string, std::string>>& settings) const {
  if (num_workers() == 1) return;
  // Two all-gathers of fixed shape per worker: the lengths, then the texts.
  const std::string mine = settings_text(settings);
  at::Tensor bytes = at::empty({static_cast<int64_t>(mine.size())}, at::kByte);
  std::memcpy(bytes.data_ptr(), mine.data(), mine.size());
  at::Tensor lengths =
      all_gather_across_workers(at::tensor({static_cast<int64_t>(mine.size())}, at::kLong));
  at::Tensor texts = all_gather_across_workers(bytes);
  std::vector<std::string> per_worker;
  int64_t offset = 0;
  for (int w = 0; w < num_workers(); ++w) {
    const int64_t n = lengths[w].item<int64_t>();
    per_worker.emplace_back(reinterpret_cast<const char*>(texts.data_ptr<uint8_t>()) + offset,
                            static_cast<size_t>(n));
    offset += n;
  }
  std::vector<std::string> order;
  const auto chiefs = parse_settings(per_worker[0], &order);
  for (int w = 1; w < num_workers(); ++w) {
    auto theirs = parse_settings(per_worker[static_cast<size_t>(w)], nullptr);
    for (const auto& [name, value] : theirs)
      if (chiefs.count(name) == 0) order.push_back(name);
    for (const auto& name : order) {
      const auto a = chiefs.find(name);
      const auto b = theirs.find(name);
      const std::string chief_value = a == chiefs.end() ? "(not set)" : a->second;
      const std::string their_value = b == theirs.end() ? "(not set)" : b->second;
      if (chief_value == their_value) continue;
      throw CollectiveError(detail::concat(
          "the workers disagree before step 1: ", worker_name(w), " has ", name, " = ", their_value,
          " where ", worker_name(0), " has ", name, " = ", chief_value,
          "; start every worker with the same settings (and, to resume, the same checkpoint "
          "directory)"));
    }
  }
}

bool StrategyExtended::any_worker(bool local) const {
  // A sum (how many workers say yes), as small integer sums travel inside their agreement.
  std::vector<at::Tensor> flag{at::tensor({local ? int64_t{1} : 0}, at::kLong)};
  all_reduce_across_workers(flag, ReduceOp::kSum);
  return flag[0].item<int64_t>() > 0;
}

std::pair<bool, int64_t> StrategyExtended::agree_step(bool has_data, int64_t local_examples) const {
  std::vector<at::Tensor> flags{at::tensor({has_data ? int64_t{1} : 0, local_examples}, at::kLong)};
  all_reduce_across_workers(flags, ReduceOp::kSum);
  return {flags[0][0].item<int64_t>() > 0, flags[0][1].item<int64_t>()};
}

std::vector<double> StrategyExtended::sum_across_workers(const std::vector<double>& local) const {
  if (local.empty()) return local;
  std::vector<at::Tensor> sums{at::tensor(local, at::kDouble)};
  all_reduce_across_workers(sums, ReduceOp::kSum);
  auto a = sums[0].accessor<double, 1>();
  std::vector<double> out(local.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = a[static_cast<int64_t>(i)];
  return out;
}

at::Tensor StrategyExtended::reduce(ReduceOp op, const std::vector<at::Tensor>& values,
                                    std::optional<int64_t> axis) const {
  DIST_CHECK_ARG(get_replica_context() == nullptr,
                 "strategy.reduce is cross-replica code: call it outside run() (inside a step, "
                 "use get_replica_context()->all_reduce)");
  int64_t count = 0;
  std::vector<at::Tensor> partial{reduce_locally(op, values, axis, &count).contiguous()};
  all_reduce_across_workers(partial, op == ReduceOp::kMean ? ReduceOp::kSum : op);
  if (op != ReduceOp::kMean) return partial[0];
  std::vector<at::Tensor> total{at::tensor({count}, at::kLong)};
  all_reduce_across_workers(total, ReduceOp::kSum);
  return partial[0] / static_cast<double>(total[0].item<int64_t>());
}

at::Tensor StrategyExtended::gather(const std::vector<at::Tensor>& values, int64_t axis) const {
  DIST_CHECK_ARG(!values.empty(), "gather needs at least one value");
  at::Tensor local = at::cat(values, axis);
  if (num_workers() == 1) return local;
  return all_gather_across_workers(local.movedim(axis, 0).contiguous()).movedim(0, axis);
}

PerReplica<data::Element> StrategyExtended::distribute_batch(const data::Element& batch,
                                                             AutoShardPolicy policy) const {
  const int64_t global = batch.empty() || batch[0].dim() == 0 ? 0 : batch[0].size(0);
  // kFile: the batch is this worker's own (its files, its part of the global batch), as with
  // kOff; DistributedIterator adds up the workers' batches to the step's global batch.
  if (policy == AutoShardPolicy::kOff || policy == AutoShardPolicy::kFile)
    return PerReplica<data::Element>(split_batch(batch, num_local_replicas()), global);
  // kData / kAuto: this worker's replicas are replicas [first, first + local) of the job.
  std::vector<data::Element> shares;
  for (int r = 0; r < num_local_replicas(); ++r)
    shares.push_back(batch_share(batch, first_replica_id() + r, num_replicas_in_sync()));
  return PerReplica<data::Element>(std::move(shares), global);
}

std::string StrategyExtended::describe() const {
  return detail::concat("strategy '", name(), "' (", num_replicas_in_sync(),
                        " replicas in sync, object ", static_cast<const void*>(this), ")");
}

int DistributedVariables::current_index() const {
  const ReplicaContext* context = get_replica_context();
  if (context == nullptr) return -1;
  const int index = context->local_replica_id();
  DIST_CHECK_ARG(context->strategy() == &strategy() && index < num_replicas(),
                 "this model was made by ", strategy().describe(),
                 " but is used inside run() of another, ", context->strategy()->describe(),
                 " (replica ", index, "); create the model with the strategy that runs it");
  return index;
}

void DistributedVariables::restore_in_primary(const std::vector<at::Tensor>& parameters,
                                              const std::vector<at::Tensor>& buffers) {
  at::NoGradGuard no_grad;
  prepare_to_write();
  // Fetched after prepare_to_write: making the values private may have replaced them.
  auto module = primary();
  auto own_parameters = module->parameters();
  auto own_buffers = module->buffers();
  DIST_INTERNAL_ASSERT(
      own_parameters.size() == parameters.size() && own_buffers.size() == buffers.size(),
      "restore: values for another model");
  for (size_t p = 0; p < parameters.size(); ++p) own_parameters[p].copy_(parameters[p]);
  for (size_t b = 0; b < buffers.size(); ++b) own_buffers[b].copy_(buffers[b]);
  sync_from_primary();
}

std::shared_ptr<torch::nn::Module> DistributedVariables::current() const {
  const int index = current_index();
  return index < 0 ? primary() : replica(index);
}

}  // namespace dist
