#include "dist/distribute/sharding.h"

#include "dist/core/error.h"

namespace dist {

std::string to_string(Sharding sharding) {
  switch (sharding) {
    case Sharding::kNone:
      return "none";
    case Sharding::kOptimizer:
      return "optimizer";
    case Sharding::kGradients:
      return "gradients";
    case Sharding::kParameters:
      return "parameters";
  }
  return "unknown";
}

Sharding parse_sharding(const std::string& text) {
  for (Sharding s :
       {Sharding::kNone, Sharding::kOptimizer, Sharding::kGradients, Sharding::kParameters})
    if (to_string(s) == text) return s;
  throw InvalidArgument(detail::concat("unknown sharding '", text,
                                       "'; choose none, optimizer, gradients or parameters"));
}

}  // namespace dist
