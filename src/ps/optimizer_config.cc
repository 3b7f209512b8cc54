#include "ps/optimizer_config.h"

#include "core/optimizer_kinds.h"
#include "dist/core/error.h"

namespace dist::ps {

rpc::OptimizerConfig optimizer_config(const detail::OptimizerWithKind& optimizer) {
  const auto& groups = optimizer.optimizer.param_groups();
  DIST_CHECK_ARG(groups.size() == 1, "ParameterServerStrategy: the optimizer has ", groups.size(),
                 " parameter groups; the ps tasks apply one set of options per update: use one "
                 "group");
  const detail::OptimizerKind* kind = optimizer.kind;
  DIST_CHECK_ARG(kind != nullptr, "ParameterServerStrategy: the ps tasks apply updates of ",
                 detail::optimizer_kind_names(),
                 "; make the optimizer with one of LibTorch's optimizers of these kinds");
  rpc::OptimizerConfig config;
  config.set_kind(kind->name);
  for (const auto& [name, value] : kind->read_options(groups[0].options()))
    (*config.mutable_options())[name] = value;
  return config;
}

}  // namespace dist::ps
