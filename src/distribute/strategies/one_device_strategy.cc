// The default strategy and OneDeviceStrategy: one replica in one process, so every collective
// is the identity and apply_gradients is a plain optimizer step.
#include "dist/distribute/one_device_strategy.h"

#include "collective/local/local_communicator.h"
#include "core/timeline_recorder.h"
#include "dist/core/error.h"
#include "distribute/step/optimizer_shards.h"
#include "distribute/strategies/gradients.h"
#include "distribute/strategies/worker_cores.h"

namespace dist {
namespace {

class OneDeviceExtended;

// The model itself: one module is every replica's and the primary.
class SingleVariables : public DistributedVariables {
 public:
  SingleVariables(std::shared_ptr<torch::nn::Module> module,
                  std::shared_ptr<StrategyExtended> owner)
      : module_(std::move(module)), owner_(std::move(owner)) {}
  std::shared_ptr<torch::nn::Module> primary() const override { return module_; }
  std::shared_ptr<torch::nn::Module> replica(int) const override { return module_; }
  int num_replicas() const override { return 1; }
  std::vector<at::Tensor> trainable_variables() const override { return module_->parameters(); }
  void sync_from_primary() override {}
  StrategyExtended& strategy() const override { return *owner_; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<StrategyExtended> owner_;
};

class OneDeviceExtended : public StrategyExtended,
                          public std::enable_shared_from_this<OneDeviceExtended> {
 public:
  OneDeviceExtended(std::string name, DeviceName device)
      : name_(std::move(name)), devices_{device} {
    DIST_CHECK_ARG(device.kind == DeviceKind::kCpu, "device ", device.to_string(),
                   " is a GPU; this build of distribute runs on CPUs only: use cpu:0");
    collective::LocalGroupOptions one;
    one.size = 1;
    group_ = std::move(collective::make_local_group(one).front());
  }

  std::string name() const override { return name_; }
  int num_replicas_in_sync() const override { return 1; }
  const std::vector<DeviceName>& local_devices() const override { return devices_; }
  int num_workers() const override { return 1; }
  int worker_index() const override { return 0; }
  bool is_chief() const override { return true; }
  void report_failure(const std::string&) override {}  // no other worker to tell

  void run_replicas(const std::function<void(int)>& body, int64_t global_batch_size) override {
    ReplicaContext context(shared_from_this(), group_.get(), 0, global_batch_size);
    ReplicaContextScope scope(&context);
    detail::ReplicaStepSpans spans;  // forward and backward, while a timeline is recorded
    body(0);
  }

  void all_reduce_across_workers(std::vector<at::Tensor>&, ReduceOp) const override {}
  at::Tensor all_gather_across_workers(const at::Tensor& local) const override { return local; }

  std::shared_ptr<DistributedVariables> create_variables(
      std::shared_ptr<torch::nn::Module> primary) override {
    DIST_CHECK_ARG(primary != nullptr, "mirror: the model is empty (a null module)");
    primary->to(devices_[0].torch_device());
    return std::make_shared<SingleVariables>(std::move(primary), shared_from_this());
  }

  void apply_gradients(DistributedVariables& variables,
                       torch::optim::Optimizer& optimizer) override {
    DIST_CHECK_ARG(&variables.strategy() == this, "apply_gradients: this model was made by ",
                   variables.strategy().describe(), ", not by this ", describe(),
                   "; make the model and optimizer with the strategy that runs them");
    TimelineSpan span("apply_gradients", "step");
    blocks_.step_alone(optimizer);  // in blocks where it can (optimizer_shards.h): same bits
    detail::clear_gradients(variables.primary()->parameters());
  }

 private:
  OptimizerShards blocks_;
  std::string name_;
  std::vector<DeviceName> devices_;
  std::unique_ptr<collective::LocalCommunicator> group_;
};

std::shared_ptr<OneDeviceExtended> make_one_device(const OneDeviceOptions& options) {
  DIST_CHECK_ARG(options.threads >= 0, "OneDeviceOptions::threads must be at least 0 (0: the ",
                 "process's cores), got ", options.threads);
  auto extended =
      std::make_shared<OneDeviceExtended>("one_device", parse_device_name(options.device));
  // The replica is the calling thread: give it the cores (one_device_strategy.h).
  detail::set_default_intra_op_threads(options.threads, detail::usable_cores());
  return extended;
}

OneDeviceOptions on_device(const std::string& device) {
  OneDeviceOptions options;
  options.device = device;
  return options;
}

}  // namespace

OneDeviceStrategy::OneDeviceStrategy(const std::string& device)
    : OneDeviceStrategy(on_device(device)) {}

OneDeviceStrategy::OneDeviceStrategy(OneDeviceOptions options)
    : Strategy(make_one_device(options)) {}

Strategy get_default_strategy() {
  static const auto extended =
      std::make_shared<OneDeviceExtended>("default", DeviceName{DeviceKind::kCpu, 0});
  return Strategy(extended);
}

}  // namespace dist
