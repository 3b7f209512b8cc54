// The options of a LibTorch optimizer as the ps tasks need them to apply its update
// (rpc::OptimizerConfig), read anew for every update so a learning-rate change reaches them.
#pragma once

#include <torch/optim/optimizer.h>

#include "ps/parameter_server.pb.h"

namespace dist::ps {

// InvalidArgument naming the optimizer when it is not SGD, Adam or Adagrad (the kinds a ps
// task applies) or has more than one parameter group.
rpc::OptimizerConfig optimizer_config(const torch::optim::Optimizer& optimizer);

}  // namespace dist::ps
