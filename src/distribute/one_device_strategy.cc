// The default strategy and OneDeviceStrategy: one replica, so every collective is the
// identity and apply_gradients is a plain optimizer step.
#include "dist/distribute/one_device_strategy.h"

#include <torch/cuda.h>

namespace dist {
namespace {

class SingleReplicaGroup : public detail::ReplicaGroup {
 public:
  int num_replicas_in_sync() const override { return 1; }
  std::vector<at::Tensor> all_reduce(int, ReduceOp,
                                     const std::vector<at::Tensor>& values) override {
    return values;  // sum, mean, min and max of one value are the value
  }
  at::Tensor all_gather(int, const at::Tensor& value, int64_t) override { return value; }
  void merge_call(int, const std::function<void()>& fn) override {
    ReplicaContextScope cross_replica(nullptr);
    fn();
  }
};

class OneDeviceExtended : public StrategyExtended,
                          public std::enable_shared_from_this<OneDeviceExtended> {
 public:
  OneDeviceExtended(std::string name, DeviceName device)
      : name_(std::move(name)), devices_{device} {
    if (device.kind == DeviceKind::kGpu) {
      DIST_CHECK_ARG(torch::cuda::is_available(), "device ", device.to_string(),
                     " is a GPU but this LibTorch has no CUDA devices; use cpu:0");
    }
  }

  std::string name() const override { return name_; }
  int num_replicas_in_sync() const override { return 1; }
  const std::vector<DeviceName>& local_devices() const override { return devices_; }

  void run_replicas(const std::function<void(int)>& body, int64_t global_batch_size) override {
    ReplicaContext context(&group_, 0, global_batch_size);
    ReplicaContextScope scope(&context);
    body(0);
  }

  std::shared_ptr<detail::MirroredVariables> mirror_module(
      std::shared_ptr<torch::nn::Module> primary) override {
    DIST_CHECK_ARG(primary != nullptr, "mirror: the model is empty (a null module)");
    primary->to(devices_[0].torch_device());
    auto variables = std::make_shared<detail::MirroredVariables>();
    variables->replicas.push_back(std::move(primary));
    variables->strategy = shared_from_this();
    return variables;
  }

  void apply_gradients(detail::MirroredVariables& variables,
                       torch::optim::Optimizer& optimizer) override {
    optimizer.step();
    detail::clear_gradients(variables.replicas.front()->parameters());
  }

 private:
  std::string name_;
  std::vector<DeviceName> devices_;
  SingleReplicaGroup group_;
};

}  // namespace

OneDeviceStrategy::OneDeviceStrategy(const std::string& device)
    : Strategy(std::make_shared<OneDeviceExtended>("one_device", parse_device_name(device))) {}

Strategy get_default_strategy() {
  static const auto extended =
      std::make_shared<OneDeviceExtended>("default", DeviceName{DeviceKind::kCpu, 0});
  return Strategy(extended);
}

}  // namespace dist
