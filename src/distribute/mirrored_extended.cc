// MirroredExtended: replica threads of one process, composed with the job's other processes.
//
// A step: run() hands each replica thread its share of the global batch with a ReplicaContext
// whose communicator is the replica's member of the HierarchicalCommunicator. The user's step
// calls backward() (each replica's copy has its own leaf parameters, so gradients land in
// per-replica .grad tensors) and then apply_gradients(), a collective:
//   1. the gradient reducer sums every replica's gradients (in process, then across
//      processes) into replica 0's .grad tensors;
//   2. one optimizer step on replica 0's parameters, whose storage every copy shares: split
//      between the replicas, each updating its share of the elements (OptimizerShards), or
//      replica 0's alone for an optimizer that cannot be split. Worker processes of one host
//      keep one copy of the parameters and slots in shared memory and split the step between
//      all their replicas (HostSharedVariables); a barrier of the workers follows;
//   3. every replica averages its buffers with the others (a collective, which also keeps the
//      others from running ahead of the step), then zeroes its own gradients.
// So every copy, in every process, holds the same values before the next forward.
#include "distribute/mirrored_extended.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <map>
#include <sstream>

#include "collective/factory.h"
#include "dist/core/error.h"
#include "dist/distribute/replica_context.h"
#include "distribute/backward_collective.h"
#include "distribute/gradients.h"
#include "distribute/optimizer_slots.h"
#include "distribute/overlapped_reducer.h"

namespace dist {
namespace {

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

void MirroredVariables::sync_from_primary() {
  // Parameters share the primary's storage; buffers are per copy.
  torch::NoGradGuard no_grad;
  const auto primary_buffers = replicas.front()->buffers();
  for (size_t r = 1; r < replicas.size(); ++r) {
    auto buffers = replicas[r]->buffers();
    for (size_t b = 0; b < buffers.size(); ++b) buffers[b].copy_(primary_buffers[b]);
  }
}

StrategyExtended& MirroredVariables::strategy() const { return *owner; }

std::vector<HostSharedVariables::Holders> MirroredVariables::parameter_holders() const {
  std::vector<std::vector<at::Tensor>> copies;
  for (const auto& replica : replicas) copies.push_back(replica->parameters());
  std::vector<HostSharedVariables::Holders> values(copies[0].size());
  for (size_t i = 0; i < values.size(); ++i)
    for (const auto& copy : copies) values[i].push_back(copy[i]);
  return values;
}

void MirroredVariables::prepare_to_write() {
  // The next step finds the parameters outside the shared copy and shares them again, from
  // worker 0's values.
  if (host_shared.active()) host_shared.unshare(parameter_holders());
}

MirroredVariables::~MirroredVariables() {
  // The modules outlive this placement: they must not keep writing into memory that other
  // processes read (a later strategy would step them whole on every worker).
  try {
    prepare_to_write();
  } catch (...) {  // cloning failed (out of memory): nothing better to do in a destructor
  }
}

MirroredExtended::MirroredExtended(std::string name, MirroredOptions options,
                                   std::unique_ptr<collective::Communicator> cross_process,
                                   bool overlap_with_backward, bool share_variables_on_host)
    : name_(std::move(name)),
      options_(std::move(options)),
      devices_(resolve_devices(options_)),
      overlap_with_backward_(overlap_with_backward),
      share_variables_on_host_(share_variables_on_host) {
  DIST_CHECK_ARG(options_.bytes_per_pack >= 1, "bytes_per_pack must be positive, got ",
                 options_.bytes_per_pack);
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
  // Collectives that finish inside the call (shared memory) gain nothing from being started
  // during backward: reduce after it (the same sums, bit for bit; 1.1x faster on the MLP).
  if (cross_process->completes_in_call()) overlap_with_backward_ = false;
  group_ = std::make_shared<collective::HierarchicalGroup>(local, std::move(cross_process));
  for (int r = 0; r < replicas; ++r) members_.push_back(group_->member(r));
  // Only reducers that send packs on their own (overlap) need the others to wait for them.
  // Not inside backward: there the replicas are still producing the step's gradients, and
  // their packs and the collective are issued in the same autograd order everywhere
  // (backward_collective.h).
  if (overlap_with_backward_)
    group_->set_before_cross_stage([this] {
      if (!in_backward_collective()) complete_reducer_steps();
    });
  // Every worker must hold the same number of replicas (equal shares of each batch).
  if (num_workers() > 1) {
    auto counts = group_->cross_process().exchange("replicas_per_worker", std::to_string(replicas));
    for (size_t w = 0; w < counts.size(); ++w)
      DIST_CHECK(counts[w] == counts[0], CollectiveError, "replica count mismatch: ",
                 group_->cross_process().member_name(static_cast<int>(w)), " has ", counts[w],
                 " replicas per worker but ", group_->cross_process().member_name(0), " has ",
                 counts[0], "; start every worker with the same replicas_per_worker");
  }
  const int threads = options_.threads_per_replica > 0 ? options_.threads_per_replica
                                                       : std::max(1, available_cores() / replicas);
  threads_ = std::make_unique<ReplicaThreads>(replicas, threads);
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
        body(replica);
      },
      [&](int replica, std::exception_ptr error) {
        group_->local().abort(detail::concat("replica ", replica, " (",
                                             devices_[static_cast<size_t>(replica)].to_string(),
                                             ") failed: ", describe_error(error)));
      });
  std::exception_ptr settle_error;
  try {
    settle_reducers();
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
  complete_reducer_steps();
  group_->cross_process().all_reduce(tensors, op)->wait();
}

at::Tensor MirroredExtended::all_gather_across_workers(const at::Tensor& local) const {
  if (num_workers() == 1) return local;
  complete_reducer_steps();
  at::Tensor all;
  group_->cross_process().all_gather(local, &all)->wait();
  return all;
}

std::shared_ptr<DistributedVariables> MirroredExtended::create_variables(
    std::shared_ptr<torch::nn::Module> primary) {
  DIST_CHECK_ARG(primary != nullptr, "mirror: the model is empty (a null module)");
  auto variables = std::make_shared<MirroredVariables>();
  variables->owner = shared_from_this();
  variables->replicas.push_back(primary);
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
    variables->replicas.push_back(std::move(copy));
  }
  generator.set_state(random_state);
  if (num_workers() > 1) synchronize_initial_values(*variables);

  std::vector<std::vector<at::Tensor>> params;
  for (const auto& replica : variables->replicas) params.push_back(replica->parameters());
  auto packs = make_packs(params[0], options_.bytes_per_pack);
  if (overlap_with_backward_) {
    std::vector<std::string> names;
    for (const auto& named : primary->named_parameters()) names.push_back(named.key());
    variables->reducer = std::make_shared<OverlappedReducer>(std::move(params), std::move(names),
                                                             std::move(packs), group_.get(), this);
  } else {
    std::vector<collective::Communicator*> communicators;
    for (const auto& member : members_) communicators.push_back(member.get());
    variables->reducer =
        make_inline_reducer(std::move(params), std::move(communicators), options_.bytes_per_pack);
  }
  std::lock_guard<std::mutex> lock(reducers_mu_);
  reducers_.push_back(variables->reducer);
  return variables;
}

MirroredVariables& MirroredExtended::mirrored(DistributedVariables& variables) const {
  auto* mirrored = dynamic_cast<MirroredVariables*>(&variables);
  DIST_CHECK_ARG(mirrored != nullptr && mirrored->owner.get() == this,
                 "apply_gradients: this model was made by ", variables.strategy().describe(),
                 ", not by this ", describe(),
                 "; make the model and optimizer with the strategy that runs them");
  DIST_CHECK_ARG(mirrored->replicas.size() == devices_.size(), "apply_gradients: the model has ",
                 mirrored->replicas.size(), " copies but this strategy runs ", devices_.size(),
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
  model.reducer->finalize(replica);
  step_optimizer(model, optimizer, replica);
  sync_buffers(model, replica);
  detail::clear_gradients(model.replicas[static_cast<size_t>(replica)]->parameters());
}

void MirroredExtended::step_optimizer(MirroredVariables& variables,
                                      torch::optim::Optimizer& optimizer, int replica) {
  // Each replica steps with its own share of the cores: changing the thread count per step
  // costs more than it saves (at::set_num_threads rebuilds thread pools).
  const int replicas = static_cast<int>(devices_.size());
  const bool across_workers = share_variables_on_host_ && num_workers() > 1;
  if (!options_.shard_optimizer_step || (replicas == 1 && !across_workers)) {
    if (replica == 0) optimizer.step();
    return;
  }
  // Planned once, after every replica's reduction has finished (so replica 0's gradients are
  // final), while the others wait.
  group_->local().barrier(replica, "apply_gradients (optimizer step)",
                          [&] { plan_step(variables, optimizer); });
  if (variables.optimizer_shards.planned()) {
    const int first = variables.step_shared_with_workers_ ? worker_index() * replicas : 0;
    variables.optimizer_shards.step(first + replica);
  } else if (replica == 0) {
    optimizer.step();
  }
  // Every worker's share is written before any worker reads the variables again.
  if (variables.step_shared_with_workers_)
    group_->local().barrier(replica, "apply_gradients (shared update)", [&] {
      group_->cross_process().barrier()->wait();
      variables.host_shared.remember_versions(variables.parameter_holders());
    });
}

namespace {

// What one step updates, as HostSharedVariables values: every parameter (held by each
// replica's copy) and every slot of its optimizer state but the step counter.
struct StepValues {
  std::vector<HostSharedVariables::Holders> values;
  // The optimizer states, by key, as slots whose tensors are handles in `values`: the state
  // the optimizer reads holds other handles (state_slots detaches), so after the slots move,
  // each state is made again from these.
  std::vector<std::pair<std::string, std::map<std::string, at::Tensor>>> states;

  StepValues(const MirroredVariables& variables, const torch::optim::Optimizer& optimizer) {
    const auto& state = optimizer.state();
    for (auto& holders : variables.parameter_holders()) {
      const std::string key = detail::state_key_of(holders[0]);
      values.push_back(std::move(holders));
      auto it = state.find(key);
      if (it == state.end()) continue;
      auto slots = detail::state_slots(optimizer, *it->second);
      for (const auto& [name, slot] : slots)
        if (name != "step") values.push_back({slot});
      states.emplace_back(key, std::move(slots));
    }
  }

  // After share() or unshare(): the optimizer's states read the slots where they are now.
  void restate(torch::optim::Optimizer& optimizer) const {
    for (const auto& [key, slots] : states)
      optimizer.state()[key] = detail::state_of_slots(optimizer, slots);
  }
};

}  // namespace

void MirroredExtended::plan_step(MirroredVariables& variables, torch::optim::Optimizer& optimizer) {
  const int replicas = static_cast<int>(devices_.size());
  const int workers = num_workers();
  variables.step_shared_with_workers_ = false;
  if (share_variables_on_host_ && workers > 1 && !variables.host_sharing_refused_) {
    const int shards = workers * replicas;
    const bool splittable = OptimizerShards::splittable(optimizer, shards);
    // Every worker decides alike from equal state; the vote turns a difference into an error
    // instead of workers updating one copy in different ways. Small models never vote.
    if (splittable || variables.host_shared.active()) {
      StepValues step(variables, optimizer);
      auto& cross = group_->cross_process();
      const bool holds = variables.host_shared.holds(step.values);
      const bool written =
          holds && variables.host_shared.written_outside_steps(variables.parameter_holders());
      std::vector<at::Tensor> votes{
          at::tensor({int64_t{splittable}, int64_t{splittable && holds}, int64_t{written}})};
      cross.all_reduce(votes, ReduceOp::kSum)->wait();
      const int64_t split = votes[0][0].item<int64_t>(), held = votes[0][1].item<int64_t>();
      DIST_CHECK(split == 0 || split == workers, CollectiveError, "apply_gradients: ", split,
                 " of ", workers,
                 " workers can split the optimizer step, the others cannot; every worker must "
                 "build the same model and optimizer");
      DIST_CHECK(votes[0][2].item<int64_t>() == 0, CollectiveError,
                 "apply_gradients: the model's parameters were changed in place outside "
                 "apply_gradients while the workers of this host share one copy of them, so "
                 "every worker's change landed on that one copy; change them with "
                 "Model::set_weights or Checkpoint::read (which give each worker its own copy "
                 "first), or set CommunicationOptions::share_variables_on_host = false");
      if (split == 0) {
        variables.host_shared.unshare(step.values);
        step.restate(optimizer);
      } else if (held == workers || variables.host_shared.share(step.values, cross)) {
        if (held < workers) step.restate(optimizer);
        const bool planned = variables.optimizer_shards.plan(optimizer, shards);
        DIST_INTERNAL_ASSERT(planned, "a splittable step did not plan");
        variables.step_shared_with_workers_ = true;
        return;
      } else {
        // No room for a new shared copy (after a restore, say): each worker takes its own.
        variables.host_shared.unshare(step.values);
        step.restate(optimizer);
        variables.host_sharing_refused_ = true;
      }
    }
  }
  variables.optimizer_shards.plan(optimizer, replicas);
}

void MirroredExtended::sync_buffers(MirroredVariables& variables, int replica) {
  std::vector<at::Tensor> floating;
  for (const auto& b : variables.replicas[static_cast<size_t>(replica)]->buffers())
    if (at::isFloatingType(b.scalar_type())) floating.push_back(b);
  if (floating.empty()) {
    group_->local().barrier(replica, "apply_gradients (update)");
    return;
  }
  torch::NoGradGuard no_grad;
  members_[static_cast<size_t>(replica)]->all_reduce(floating, ReduceOp::kMean)->wait();
}

void MirroredExtended::synchronize_initial_values(MirroredVariables& variables) {
  check_same_model(*variables.replicas[0]);
  // The chief's initial values win everywhere.
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors;
  for (const auto& p : variables.replicas[0]->parameters()) tensors.push_back(p.detach());
  for (const auto& b : variables.replicas[0]->buffers()) tensors.push_back(b);
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

void MirroredExtended::complete_reducer_steps() const {
  if (!overlap_with_backward_) return;  // the inline reducer has nothing in flight
  std::lock_guard<std::mutex> lock(reducers_mu_);
  for (const auto& weak : reducers_)
    if (auto reducer = weak.lock()) reducer->complete_step();
}

void MirroredExtended::settle_reducers() {
  std::lock_guard<std::mutex> lock(reducers_mu_);
  for (auto it = reducers_.begin(); it != reducers_.end();) {
    if (auto reducer = it->lock()) {
      reducer->settle();
      ++it;
    } else {
      it = reducers_.erase(it);
    }
  }
}

}  // namespace dist
