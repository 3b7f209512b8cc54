#include "collective/fingerprint.h"

#include <c10/core/ScalarType.h>

#include "dist/core/error.h"

namespace dist::collective {

std::string describe(const Fingerprint& f) {
  static const char* kKinds[] = {"?",          "all_reduce", "broadcast",     "all_gather (sizes)",
                                 "all_gather", "barrier",    "reduce_scatter"};
  const int64_t base = f.kind % 16, detail = f.kind / 16;
  std::string name = base >= 1 && base <= 6 ? kKinds[base] : "?";
  if (base == 1 || base == 6) {
    static const char* kOps[] = {"SUM", "MEAN", "MIN", "MAX"};
    name += std::string(" ") + (detail >= 0 && detail < 4 ? kOps[detail] : "?");
  }
  if (base == 2) name += " from rank " + std::to_string(detail);
  if (base == 5) return name;
  return detail::concat(name, " of ", f.elements, " ",
                        f.dtype >= 0 && f.dtype < static_cast<int64_t>(at::ScalarType::NumOptions)
                            ? c10::toString(static_cast<at::ScalarType>(f.dtype))
                            : "?",
                        " values in ", f.tensors, base == 6 ? " row" : " tensor",
                        f.tensors == 1 ? "" : "s");
}

}  // namespace dist::collective
