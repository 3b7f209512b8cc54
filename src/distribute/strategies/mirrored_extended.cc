// MirroredExtended: replica threads of one process, composed with the job's other processes.
//
// A step: run() hands each replica thread its share of the global batch with a ReplicaContext
// whose communicator is the replica's member of the HierarchicalCommunicator. The user's step
// calls backward() (each replica's copy has its own leaf parameters, so gradients land in
// per-replica .grad tensors) and then apply_gradients(), a collective:
//   1. the model's gradient reducer (made by the strategy's GradientReduction, inline or
//      overlapped with backward) sums every replica's gradients (in process, then across
//      processes) into replica 0's .grad tensors;
//   2. one optimizer step on replica 0's parameters, whose storage every copy shares, taken as
//      the model's OptimizerStepPlan says: by replica 0, split between the local replicas, or
//      split between every replica of the workers of one host over one shared copy;
//   3. every replica averages its buffers with the others (a collective, which also keeps the
//      others from running ahead of the step), then zeroes its own gradients.
// So every copy, in every process, holds the same values before the next forward.
#include "distribute/strategies/mirrored_extended.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <sstream>

#include "collective/factory.h"
#include "core/timeline_recorder.h"
#include "dist/core/error.h"
#include "dist/distribute/replica_context.h"
#include "distribute/step/layer_gathering.h"
#include "distribute/step/sharded_step.h"
#include "distribute/strategies/gradients.h"
#include "distribute/strategies/worker_cores.h"

namespace dist {
namespace {

void check_sharding(const MirroredOptions& options, size_t replicas) {
  DIST_CHECK_ARG(options.sharding != Sharding::kParameters || replicas == 1,
                 "sharding 'parameters' (ZeRO stage 3) shards the parameters between worker "
                 "processes of one replica each; this worker has ",
                 replicas,
                 " replicas, which would each gather the same layers: give each worker one "
                 "replica (more workers instead), or use sharding 'gradients'");
  DIST_CHECK_ARG(options.sharding == Sharding::kNone || !options.communication_hook, "sharding '",
                 to_string(options.sharding), "' and the communication hook '",
                 options.communication_hook ? options.communication_hook->name() : "",
                 "' both decide how gradient packs cross the workers; use one of them");
  const int64_t reuse = options.sharding_reuse_bytes.value_or(kDefaultShardingReuseBytes);
  DIST_CHECK_ARG(reuse >= -1, "sharding_reuse_bytes ", reuse,
                 " is below -1; give -1 (every layer stays whole from its forward to its "
                 "backward), 0 (only the last) or a number of bytes");
  DIST_CHECK_ARG(!options.sharding_reuse_bytes || options.sharding == Sharding::kParameters,
                 "sharding_reuse_bytes ", reuse,
                 " says which layers sharding 'parameters' keeps whole for their backward; with "
                 "sharding '",
                 to_string(options.sharding),
                 "' every parameter is whole already: leave it unset, or use "
                 "Sharding::kParameters");
}

std::string describe_error(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// One line per parameter and buffer: "name shape dtype".
std::string model_signature(const torch::nn::Module& module) {
  std::ostringstream lines;
  for (const auto& p : module.named_parameters())
    lines << "parameter '" << p.key() << "' " << p.value().sizes() << " " << p.value().scalar_type()
          << "\n";
  for (const auto& b : module.named_buffers())
    lines << "buffer '" << b.key() << "' " << b.value().sizes() << " " << b.value().scalar_type()
          << "\n";
  return lines.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

MirroredExtended::MirroredExtended(std::string name, MirroredOptions options,
                                   std::unique_ptr<collective::Communicator> cross_process,
                                   bool overlap_with_backward, bool share_variables_on_host)
    : name_(std::move(name)), options_(std::move(options)), devices_(resolve_devices(options_)) {
  DIST_CHECK_ARG(options_.bytes_per_pack >= 1, "bytes_per_pack must be positive, got ",
                 options_.bytes_per_pack);
  DIST_CHECK_ARG(options_.min_compressed_pack_bytes >= -1,
                 "min_compressed_pack_bytes must be -1 (the hook's own) or at least 0, got ",
                 options_.min_compressed_pack_bytes);
  DIST_CHECK_ARG(options_.collective_timeout.count() > 0,
                 "collective_timeout must be positive, got ", options_.collective_timeout.count(),
                 " ms");
  DIST_CHECK_ARG(options_.threads_per_replica >= 0, "threads_per_replica must be at least 0");
  const int replicas = static_cast<int>(devices_.size());
  collective::LocalGroupOptions local;
  local.size = replicas;
  local.algorithm = options_.cross_device_ops;
  local.timeout = options_.collective_timeout;
  if (!cross_process) cross_process = collective::make_single_process_communicator();
  check_sharding(options_, devices_.size());
  // Decided before the communicator is wrapped: the counter answers completes_in_call alike.
  const bool completes_in_call = cross_process->completes_in_call();
  cross_process = collective::count_bytes(std::move(cross_process), counters_);
  // Sharded collectives are rings of send/recv that complete in the call: on a thread of their
  // own, stage 3 gathers the next layer while this one computes, and stages 1 and 2 across
  // hosts reduce-scatter a pack while backward makes the next and gather a pack while the next
  // one steps (on one host, where the collectives go through shared memory after backward,
  // there is nothing idle to overlap).
  const bool sharded = options_.sharding != Sharding::kNone && cross_process->size() > 1;
  const bool collective_thread =
      sharded && (options_.sharding == Sharding::kParameters || !completes_in_call);
  group_ = std::make_shared<collective::HierarchicalGroup>(local, std::move(cross_process),
                                                           collective_thread);
  for (int r = 0; r < replicas; ++r) members_.push_back(group_->member(r));
  choose_parts(overlap_with_backward && !completes_in_call, share_variables_on_host);
  // Every worker must hold the same number of replicas (equal shares of each batch).
  if (num_workers() > 1) {
    auto counts = group_->cross_process().exchange("replicas_per_worker", std::to_string(replicas));
    for (size_t w = 0; w < counts.size(); ++w)
      DIST_CHECK(counts[w] == counts[0], CollectiveError, "replica count mismatch: ",
                 group_->cross_process().member_name(static_cast<int>(w)), " has ", counts[w],
                 " replicas per worker but ", group_->cross_process().member_name(0), " has ",
                 counts[0], "; start every worker with the same replicas_per_worker");
  }
  const int threads = options_.threads_per_replica > 0
                          ? options_.threads_per_replica
                          : std::max(1, detail::usable_cores() / replicas);
  // Before the replica threads start: their at::set_num_threads changes the count a thread
  // begins with, which would read as the user's choice (mirrored_strategy.h).
  detail::set_default_intra_op_threads(0, threads * replicas);
  threads_ = std::make_unique<ReplicaThreads>(replicas, threads);
}

void MirroredExtended::choose_parts(bool overlap_with_backward, bool share_variables_on_host) {
  // Collectives that finish inside the call (shared memory) gain nothing from being started
  // during backward: reduce after it (the same sums, bit for bit; 1.1x faster on the MLP).
  // A communication hook reduces packs as they come, whatever the communicator (the
  // multi-worker strategy refuses one without overlap_with_backward); so does sharding, whose
  // packs land in this worker's chunks pack by pack.
  const bool sharded = options_.sharding != Sharding::kNone;
  if (options_.communication_hook || sharded || overlap_with_backward) {
    PackExchange exchange;
    exchange.communicate =
        communicate_through(options_.communication_hook, options_.min_compressed_pack_bytes);
    if (sharded) {
      exchange = sharded_exchange(sharding_state_, options_.sharding);
      // Not at stage 3: its gathers keep the workers in step through backward already, and a
      // pack held to the end of backward would keep every full gradient at once.
      exchange.after_backward =
          group_->cross_process().completes_in_call() && options_.sharding != Sharding::kParameters;
    }
    reduction_ =
        make_overlapped_reduction(group_.get(), this, bytes_per_pack(), std::move(exchange));
  } else {
    std::vector<collective::Communicator*> members;
    for (const auto& member : members_) members.push_back(member.get());
    reduction_ = make_inline_reduction(std::move(members), options_.bytes_per_pack);
  }
  const int replicas = static_cast<int>(devices_.size());
  make_step_plan_ = sharded ? sharded_step_plan(sharding_state_)
                            : choose_step_plan(options_.shard_optimizer_step,
                                               share_variables_on_host, replicas, num_workers());
}

std::string MirroredExtended::worker_name(int index) const {
  return group_->cross_process().member_name(index);
}

void MirroredExtended::report_failure(const std::string& reason) {
  group_->cross_process().abort(reason);
}

void MirroredExtended::run_replicas(const std::function<void(int)>& body,
                                    int64_t global_batch_size) {
  DIST_CHECK_ARG(get_replica_context() == nullptr,
                 "strategy.run() was called inside a step function; call it from "
                 "cross-replica code (outside run())");
  std::lock_guard<std::mutex> one_run_at_a_time(run_mu_);
  group_->local().reset();
  const std::shared_ptr<const StrategyExtended> self = shared_from_this();
  auto errors = threads_->run(
      [&](int replica) {
        ReplicaContext context(self, members_[static_cast<size_t>(replica)].get(), replica,
                               global_batch_size);
        ReplicaContextScope scope(&context);
        detail::ReplicaStepSpans spans;  // forward and backward, while a timeline is recorded
        body(replica);
      },
      [&](int replica, std::exception_ptr error) {
        group_->local().abort(detail::concat("replica ", replica, " (",
                                             devices_[static_cast<size_t>(replica)].to_string(),
                                             ") failed: ", describe_error(error)));
      });
  std::exception_ptr settle_error;
  try {
    TimelineSpan span("settle", "collective");
    reduction_->settle();
  } catch (...) {
    settle_error = std::current_exception();
  }
  // Rethrow the root cause: the first replica's own error, not the CollectiveErrors the
  // others got because it stopped taking part.
  std::exception_ptr first_collective;
  for (const auto& error : errors) {
    if (!error) continue;
    try {
      std::rethrow_exception(error);
    } catch (const CollectiveError&) {
      if (!first_collective) first_collective = error;
    } catch (...) {
      throw;
    }
  }
  if (first_collective) std::rethrow_exception(first_collective);
  if (settle_error) std::rethrow_exception(settle_error);
}

void MirroredExtended::all_reduce_across_workers(std::vector<at::Tensor>& tensors,
                                                 ReduceOp op) const {
  if (num_workers() == 1) return;
  reduction_->complete_steps();
  group_->cross_process().all_reduce(tensors, op)->wait();
}

at::Tensor MirroredExtended::all_gather_across_workers(const at::Tensor& local) const {
  if (num_workers() == 1) return local;
  reduction_->complete_steps();
  at::Tensor all;
  group_->cross_process().all_gather(local, &all)->wait();
  return all;
}

std::shared_ptr<DistributedVariables> MirroredExtended::create_variables(
    std::shared_ptr<torch::nn::Module> primary) {
  DIST_CHECK_ARG(primary != nullptr, "mirror: the model is empty (a null module)");
  const bool shard_parameters = options_.sharding == Sharding::kParameters;
  std::vector<std::vector<size_t>> units;  // stage 3's, checked before anything changes
  if (shard_parameters) units = parameter_units(*primary, primary->parameters());
  if (options_.sharding != Sharding::kNone && !shard_parameters)
    place_packs_contiguously(*primary, options_.bytes_per_pack);
  auto variables = std::make_shared<MirroredVariables>(shared_from_this(), mirror(primary));
  if (num_workers() > 1) synchronize_initial_values(*variables);
  std::vector<std::vector<at::Tensor>> params;
  for (const auto& replica : variables->replicas_) params.push_back(replica->parameters());
  std::vector<std::string> names;
  for (const auto& named : primary->named_parameters()) names.push_back(named.key());
  const int model = models_placed_++;
  variables->reducer_ = reduction_->make_reducer(std::move(params), std::move(names), model);
  if (shard_parameters) {  // after the reducer, which takes the parameters' shapes while whole
    auto shards = std::make_shared<ParameterShards>(
        primary->parameters(), std::move(units), group_,
        options_.sharding_reuse_bytes.value_or(kDefaultShardingReuseBytes));
    sharding_state_->set_parameter_shards(model, shards);
    gather_by_units(*primary, shards);
    variables->parameter_shards_ = std::move(shards);
  }
  const MirroredVariables* placed = variables.get();
  variables->step_plan_ =
      make_step_plan_({group_.get(), [placed] { return placed->parameter_holders(); }, model});
  return variables;
}

std::vector<std::shared_ptr<torch::nn::Module>> MirroredExtended::mirror(
    std::shared_ptr<torch::nn::Module> primary) {
  std::vector<std::shared_ptr<torch::nn::Module>> replicas{primary};
  const auto primary_params = primary->parameters();
  // clone() re-initializes the copy (reset()) from the global random generator before it
  // copies the primary's values in: put the generator back afterwards, so that mirroring
  // draws nothing and a program that makes several models gives them the same initial
  // weights under every strategy and replica count.
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  const at::Tensor random_state = generator.get_state();
  for (size_t r = 1; r < devices_.size(); ++r) {
    std::shared_ptr<torch::nn::Module> copy;
    try {
      copy = primary->clone();
    } catch (const c10::Error& e) {
      throw InvalidArgument(detail::concat(
          "mirror: cannot copy module ", primary->name(), " for replica ", r,
          ": derive it from torch::nn::Cloneable<", primary->name(),
          "> (or build it from torch::nn::Sequential) so each replica can get a copy"));
    }
    // Share the parameters' storage with the primary; each copy keeps its own leaf
    // variables (so its own gradients) and its own buffers. Match by position: a clone
    // may name its submodules differently (Sequential's clone numbers them).
    auto copy_params = copy->parameters();
    DIST_INTERNAL_ASSERT(copy_params.size() == primary_params.size(), "clone of ", primary->name(),
                         " has a different parameter count");
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < copy_params.size(); ++i) copy_params[i].set_data(primary_params[i]);
    replicas.push_back(std::move(copy));
  }
  generator.set_state(random_state);
  return replicas;
}

MirroredVariables& MirroredExtended::mirrored(DistributedVariables& variables) const {
  auto* mirrored = dynamic_cast<MirroredVariables*>(&variables);
  DIST_CHECK_ARG(mirrored != nullptr && mirrored->owner() == this,
                 "apply_gradients: this model was made by ", variables.strategy().describe(),
                 ", not by this ", describe(),
                 "; make the model and optimizer with the strategy that runs them");
  DIST_CHECK_ARG(mirrored->replicas_.size() == devices_.size(), "apply_gradients: the model has ",
                 mirrored->replicas_.size(), " copies but this strategy runs ", devices_.size(),
                 " replicas; make the model and optimizer with the strategy that runs them");
  return *mirrored;
}

void MirroredExtended::apply_gradients(DistributedVariables& variables,
                                       torch::optim::Optimizer& optimizer) {
  MirroredVariables& model = mirrored(variables);
  ReplicaContext* context = get_replica_context();
  if (context == nullptr) {
    // Cross-replica code (after run()): the same collective, run on every replica.
    run_replicas([&](int) { apply_gradients(variables, optimizer); }, -1);
    return;
  }
  DIST_CHECK_ARG(context->strategy() == this,
                 "apply_gradients was called inside run() of a different strategy than the "
                 "one that made this optimizer");
  const int replica = context->local_replica_id();
  TimelineSpan span("apply_gradients", "step");
  // A plan that steps by packs steps each pack as it lands, then has nothing left in step().
  model.reducer_->finalize(replica,
                           model.step_plan_->step_by_packs(replica, optimizer, *model.reducer_));
  model.step_plan_->step(replica, optimizer);
  sync_buffers(model, replica);
  detail::clear_gradients(model.replicas_[static_cast<size_t>(replica)]->parameters());
}

void MirroredExtended::sync_buffers(MirroredVariables& variables, int replica) {
  std::vector<at::Tensor> floating;
  for (const auto& b : variables.replicas_[static_cast<size_t>(replica)]->buffers())
    if (at::isFloatingType(b.scalar_type())) floating.push_back(b);
  if (floating.empty()) {
    group_->local().barrier(replica, "apply_gradients (update)");
    return;
  }
  torch::NoGradGuard no_grad;
  members_[static_cast<size_t>(replica)]->all_reduce(floating, ReduceOp::kMean)->wait();
}

void MirroredExtended::synchronize_initial_values(MirroredVariables& variables) {
  check_same_model(*variables.replicas_[0]);
  // The chief's initial values win everywhere.
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors;
  for (const auto& p : variables.replicas_[0]->parameters()) tensors.push_back(p.detach());
  for (const auto& b : variables.replicas_[0]->buffers()) tensors.push_back(b);
  group_->cross_process().broadcast(tensors, 0)->wait();
  variables.sync_from_primary();
}

void MirroredExtended::check_same_model(const torch::nn::Module& model) {
  // Every worker compares every worker's model with the chief's, so all of them fail
  // together with the same message, before the first step.
  auto& cross = group_->cross_process();
  auto signatures =
      cross.exchange("model/" + std::to_string(models_created_++), model_signature(model));
  auto reference = split_lines(signatures[0]);
  for (size_t w = 1; w < signatures.size(); ++w) {
    auto mine = split_lines(signatures[w]);
    for (size_t i = 0; i < std::max(mine.size(), reference.size()); ++i) {
      std::string theirs = i < mine.size() ? mine[i] : "(nothing)";
      std::string chiefs = i < reference.size() ? reference[i] : "(nothing)";
      if (theirs != chiefs)
        throw CollectiveError(
            detail::concat("model mismatch before step 1: ", cross.member_name(static_cast<int>(w)),
                           " has ", theirs, " where ", cross.member_name(0), " has ", chiefs,
                           "; every worker must build the same model"));
    }
  }
}

}  // namespace dist
