// ParameterServerStrategy: variables on ps tasks, steps on workers (parameter_server_extended.h).
#include "ps/parameter_server_extended.h"

#include <torch/torch.h>

#include "dist/core/error.h"
#include "distribute/step/optimizer_slots.h"
#include "distribute/strategies/gradients.h"
#include "ps/optimizer_config.h"

namespace dist {
namespace {

// A model whose current values live on the ps tasks; the module holds the values of the last
// read (in a step: the values the step computes with).
class PsVariables : public DistributedVariables {
 public:
  PsVariables(std::shared_ptr<torch::nn::Module> module, int model,
              std::shared_ptr<ParameterServerExtended> owner)
      : module_(std::move(module)), model_(model), owner_(std::move(owner)) {}
  std::shared_ptr<torch::nn::Module> primary() const override { return module_; }
  std::shared_ptr<torch::nn::Module> replica(int) const override { return module_; }
  int num_replicas() const override { return 1; }
  std::vector<at::Tensor> trainable_variables() const override { return module_->parameters(); }
  void prepare_to_read() override { owner_->pull(model_); }
  // A restore on the chief becomes the job's values; elsewhere the next step reads them anew.
  void sync_from_primary() override {
    if (owner_->is_chief()) owner_->push_values(model_);
  }
  void prepare_to_read_slots(torch::optim::Optimizer& optimizer) override {
    owner_->pull_slots(model_, optimizer);
  }
  void sync_slots_from(torch::optim::Optimizer& optimizer) override {
    if (owner_->is_chief()) owner_->push_slots(model_, optimizer);
  }
  StrategyExtended& strategy() const override { return *owner_; }
  int model() const { return model_; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  int model_;
  std::shared_ptr<ParameterServerExtended> owner_;
};

std::vector<ps::Task> ps_tasks(const ClusterConfig& config) {
  std::vector<ps::Task> tasks;
  for (int i = 0; i < config.cluster.num_tasks("ps"); ++i) {
    const TaskSpec task{"ps", i};
    tasks.push_back({task.name(), config.cluster.address(task).to_string()});
  }
  return tasks;
}

void check_cluster(const ClusterConfig& config) {
  const std::string& type = config.task.type;
  DIST_CHECK_ARG(config.cluster.num_tasks("ps") > 0,
                 "ParameterServerStrategy: the cluster has no ps task; list their addresses "
                 "under \"ps\" in TF_CONFIG's cluster");
  DIST_CHECK_ARG(config.cluster.num_tasks("chief") == 1,
                 "ParameterServerStrategy: the cluster has no chief; the chief is the "
                 "coordinator that schedules the steps: add a \"chief\" entry to TF_CONFIG");
  DIST_CHECK_ARG(config.cluster.num_tasks("worker") > 0,
                 "ParameterServerStrategy: the cluster has no worker to run steps; add a "
                 "\"worker\" list to TF_CONFIG's cluster");
  DIST_CHECK_ARG(type == "chief" || type == "worker" || type == "ps",
                 "ParameterServerStrategy: ", "task type '", type,
                 "' takes no part in training (an evaluator reads the checkpoints the chief "
                 "writes); make no strategy there");
}

}  // namespace

ParameterServerExtended::ParameterServerExtended(ParameterServerOptions options,
                                                 ClusterConfig config)
    : options_(std::move(options)),
      config_(std::move(config)),
      devices_{DeviceName{DeviceKind::kCpu, 0}} {
  check_cluster(config_);
  DIST_CHECK_ARG(options_.rpc_timeout.count() > 0 && options_.startup_timeout.count() > 0 &&
                     options_.step_timeout.count() > 0 && options_.coordinator_timeout.count() > 0,
                 "ParameterServerOptions: every timeout must be positive");
  collective::LocalGroupOptions one;
  one.size = 1;
  group_ = std::move(collective::make_local_group(one).front());
  servers_ = std::make_unique<ps::ParameterServers>(ps_tasks(config_), options_.rpc_timeout);
}

std::string ParameterServerExtended::task_description() const {
  return config_.task.name() + " (" + config_.cluster.address(config_.task).to_string() + ")";
}

void ParameterServerExtended::run_replicas(const std::function<void(int)>& body,
                                           int64_t global_batch_size) {
  DIST_CHECK_ARG(task_type() != "ps", "ParameterServerStrategy: ", task_description(),
                 " is a ps task, which runs no steps; call coordinator.serve() there");
  {
    // Lookups of an earlier step that never applied its gradients must not reach this one's.
    std::lock_guard<std::mutex> lock(models_mutex_);
    for (const PlacedModel& placed : models_)
      for (const Table& table : placed.tables) table.layer->take_lookups();
  }
  pull_all();
  ReplicaContext context(shared_from_this(), group_.get(), 0, global_batch_size);
  ReplicaContextScope scope(&context);
  body(0);
}

std::shared_ptr<DistributedVariables> ParameterServerExtended::create_variables(
    std::shared_ptr<torch::nn::Module> primary) {
  DIST_CHECK_ARG(primary != nullptr, "mirror: the model is empty (a null module)");
  std::lock_guard<std::mutex> lock(models_mutex_);
  const int model = static_cast<int>(models_.size());
  PlacedModel placed{primary, {}, {}};
  for (const auto& p : primary->named_parameters())
    placed.variables.push_back(servers_->place("m" + std::to_string(model) + "/" + p.key(),
                                               p.value(), options_.partitioner));
  connect_tables(placed);
  if (is_chief()) {
    // The chief's initial values become the job's: it is the only task that creates.
    if (!servers_ready_) {
      servers_->wait_until_ready(options_.startup_timeout, config_.task.name());
      servers_ready_ = true;
    }
    const auto parameters = primary->parameters();
    for (size_t i = 0; i < parameters.size(); ++i)
      servers_->create(placed.variables[i], parameters[i].detach());
  }
  models_.push_back(std::move(placed));
  return std::make_shared<PsVariables>(std::move(primary), model, shared_from_this());
}

bool ParameterServerExtended::PlacedModel::is_table(size_t parameter) const {
  for (const Table& table : tables)
    if (table.parameter == parameter) return true;
  return false;
}

void ParameterServerExtended::connect_tables(PlacedModel& placed) {
  const auto parameters = placed.module->parameters();
  for (const auto& module : placed.module->modules(/*include_self=*/true)) {
    auto layer = std::dynamic_pointer_cast<ShardedEmbeddingImpl>(module);
    if (!layer) continue;
    size_t index = 0;
    while (index < parameters.size() && !parameters[index].is_same(layer->weight)) ++index;
    DIST_INTERNAL_ASSERT(index < parameters.size(),
                         "a ShardedEmbedding's table is not among its "
                         "model's parameters");
    placed.tables.push_back({index, layer});
    if (task_type() == "ps") continue;  // a ps task runs no step
    // The layer may outlive the strategy: it then says so instead of calling a closed channel.
    std::weak_ptr<ParameterServerExtended> owner = weak_from_this();
    layer->set_row_source([owner, variable = placed.variables[index]](const at::Tensor& ids) {
      // Outside a step the local table holds the values of the last read, as every other
      // variable does (a chief evaluating after prepare_to_read() computes locally).
      const ReplicaContext* context = get_replica_context();
      if (context == nullptr) return at::Tensor();
      auto strategy = owner.lock();
      DIST_CHECK_ARG(strategy != nullptr, "ShardedEmbedding '", variable.name,
                     "': the ParameterServerStrategy that placed its table is gone; keep the "
                     "strategy alive while the model runs");
      if (context->strategy() != strategy.get()) return at::Tensor();
      return strategy->parameter_servers().lookup(variable, ids);
    });
  }
}

void ParameterServerExtended::read_into(const std::vector<int>& models, bool whole_tables) {
  if (task_type() == "ps") return;  // a ps task's models are never trained there
  std::vector<const ps::PlacedVariable*> variables;
  std::vector<at::Tensor> targets;
  {
    std::lock_guard<std::mutex> lock(models_mutex_);
    for (int m : models) {
      const PlacedModel& placed = models_[static_cast<size_t>(m)];
      const auto parameters = placed.module->parameters();
      for (size_t i = 0; i < parameters.size(); ++i) {
        if (!whole_tables && placed.is_table(i)) continue;
        variables.push_back(&placed.variables[i]);
        targets.push_back(parameters[i]);
      }
    }
  }
  if (variables.empty()) return;
  const auto values = servers_->read(variables);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < values.size(); ++i) targets[i].detach().copy_(values[i]);
}

void ParameterServerExtended::pull_all() {
  std::vector<int> all;
  {
    std::lock_guard<std::mutex> lock(models_mutex_);
    for (size_t m = 0; m < models_.size(); ++m) all.push_back(static_cast<int>(m));
  }
  read_into(all, /*whole_tables=*/false);
}

void ParameterServerExtended::pull(int model) { read_into({model}, /*whole_tables=*/true); }

void ParameterServerExtended::push_values(int model) {
  std::lock_guard<std::mutex> lock(models_mutex_);
  const PlacedModel& placed = models_.at(static_cast<size_t>(model));
  const auto parameters = placed.module->parameters();
  for (size_t i = 0; i < parameters.size(); ++i)
    servers_->assign(placed.variables[i], parameters[i].detach());
}

void ParameterServerExtended::pull_slots(int model, torch::optim::Optimizer& optimizer) {
  if (task_type() == "ps") return;
  const detail::OptimizerWithKind with(optimizer);  // for the whole walk over its slots
  const std::string kind = detail::listed_kind(with).name;
  // A shard no update has reached starts where the optimizer starts: zeros, except Adagrad's
  // sum, which starts at its initial accumulator value.
  double initial_sum = 0;
  if (const auto* adagrad = dynamic_cast<const torch::optim::AdagradOptions*>(
          &optimizer.param_groups().at(0).options()))
    initial_sum = adagrad->initial_accumulator_value();
  const ps::ParameterServers::FreshSlot fresh = [&](const std::string& slot, const at::Tensor& like,
                                                    int64_t rows) {
    auto shape = like.sizes().vec();
    shape[0] = rows;
    return at::full(shape, kind == "Adagrad" && slot == "sum" ? initial_sum : 0.0, like.options());
  };
  std::lock_guard<std::mutex> lock(models_mutex_);
  const PlacedModel& placed = models_.at(static_cast<size_t>(model));
  const auto parameters = placed.module->parameters();
  detail::ParameterSlots slots;
  std::map<const void*, std::string> names;
  for (size_t i = 0; i < parameters.size(); ++i) {
    ps::ParameterServers::Slots held = servers_->read_slots(placed.variables[i], fresh);
    if (held.tensors.empty()) continue;  // no update yet, or an optimizer without state
    DIST_CHECK_ARG(held.kind == kind, "the ps tasks update '", placed.variables[i].name, "' with ",
                   held.kind, ", but the optimizer whose state is read is ", kind,
                   "; read it with the optimizer the steps use");
    slots.emplace_back(parameters[i].unsafeGetTensorImpl(), std::move(held.tensors));
    names[parameters[i].unsafeGetTensorImpl()] = placed.variables[i].name;
  }
  detail::check_slots(
      with, slots, [&](const void* impl) { return names.at(impl); },
      [](const std::string& message) {
        throw DataError("the optimizer slots read from the ps tasks do not fit: " + message);
      });
  detail::import_slots(with, slots);
}

void ParameterServerExtended::push_slots(int model, torch::optim::Optimizer& optimizer) {
  const detail::OptimizerWithKind with(optimizer);  // for the whole walk over its slots
  const ps::rpc::OptimizerConfig config = ps::optimizer_config(with);
  const detail::ParameterSlots exported = detail::export_slots(with);
  std::lock_guard<std::mutex> lock(models_mutex_);
  const PlacedModel& placed = models_.at(static_cast<size_t>(model));
  const auto parameters = placed.module->parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    for (const auto& [impl, tensors] : exported) {
      if (impl != parameters[i].unsafeGetTensorImpl()) continue;
      ps::ParameterServers::Slots slots{config.kind(), tensors, 0};
      if (auto step = tensors.find("step"); step != tensors.end())
        slots.optimizer_steps = step->second.item<int64_t>();
      servers_->assign(placed.variables[i], parameters[i].detach(), slots, config);
    }
  }
}

void ParameterServerExtended::apply_gradients(DistributedVariables& variables,
                                              torch::optim::Optimizer& optimizer) {
  auto* placed_variables = dynamic_cast<PsVariables*>(&variables);
  DIST_CHECK_ARG(placed_variables != nullptr && &variables.strategy() == this,
                 "apply_gradients: this model was made by ", variables.strategy().describe(),
                 ", not by this ", describe(),
                 "; make the model and optimizer with the strategy that runs them");
  const ps::rpc::OptimizerConfig config =
      ps::optimizer_config(detail::OptimizerWithKind(optimizer));
  std::vector<std::pair<const ps::PlacedVariable*, at::Tensor>> dense;
  std::vector<std::pair<const ps::PlacedVariable*, ps::ParameterServers::Sparse>> sparse;
  std::vector<at::Tensor> parameters;
  {
    std::lock_guard<std::mutex> lock(models_mutex_);
    const PlacedModel& placed = models_.at(static_cast<size_t>(placed_variables->model()));
    parameters = placed.module->parameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      const at::Tensor& grad = parameters[i].grad();
      if (!grad.defined()) continue;
      if (grad.is_sparse()) {
        // An embedding's gradient names the rows it touched: only those travel.
        const at::Tensor g = grad.coalesce();
        sparse.push_back(
            {&placed.variables[i], {g.indices()[0].contiguous(), g.values().contiguous()}});
      } else {
        dense.push_back({&placed.variables[i], grad});
      }
    }
    for (const Table& table : placed.tables) {
      // The rows the step looked up, with their gradients: the only part of the table sent.
      std::vector<at::Tensor> ids, grads;
      for (const auto& lookup : table.layer->take_lookups()) {
        if (!lookup.rows.grad().defined()) continue;
        ids.push_back(lookup.ids);
        grads.push_back(lookup.rows.grad());
      }
      if (ids.empty()) continue;
      ps::ParameterServers::Sparse update{ids[0], grads[0]};
      if (ids.size() > 1) {
        // Several lookups may name one row; a sparse update names each row once.
        const at::Tensor summed = at::sparse_coo_tensor(at::cat(ids).unsqueeze(0), at::cat(grads),
                                                        table.layer->weight.sizes())
                                      .coalesce();
        update = {summed.indices()[0].contiguous(), summed.values().contiguous()};
      }
      sparse.push_back({&placed.variables[table.parameter], std::move(update)});
    }
  }
  servers_->apply(config, dense, sparse);
  detail::clear_gradients(parameters);
}

ParameterServerStrategy::ParameterServerStrategy(ParameterServerOptions options)
    : Strategy([&] {
        ClusterConfig config =
            options.cluster ? *options.cluster : cluster_config_from_environment();
        return std::make_shared<ParameterServerExtended>(std::move(options), std::move(config));
      }()) {}

namespace {
ParameterServerExtended& extended_of(const Strategy& strategy) {
  return static_cast<ParameterServerExtended&>(strategy.extended());  // the constructor made it
}
}  // namespace

const std::string& ParameterServerStrategy::task_type() const {
  return extended_of(*this).task_type();
}

int64_t ParameterServerStrategy::bytes_sent() const {
  return extended_of(*this).parameter_servers().bytes_sent();
}

int64_t ParameterServerStrategy::bytes_received() const {
  return extended_of(*this).parameter_servers().bytes_received();
}

}  // namespace dist
