// The options of a LibTorch optimizer as the ps tasks need them to apply its update
// (rpc::OptimizerConfig), read anew for every update so a learning-rate change reaches them.
#pragma once

#include "core/optimizer_kinds.h"
#include "ps/parameter_server.pb.h"

namespace dist::ps {

// Its kind (as the caller found it) and options (optimizer_kinds.h); InvalidArgument when the
// optimizer is of no kind the table lists or has more than one parameter group.
rpc::OptimizerConfig optimizer_config(const detail::OptimizerWithKind& optimizer);

}  // namespace dist::ps
