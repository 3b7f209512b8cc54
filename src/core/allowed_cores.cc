#include "core/allowed_cores.h"

#include <sched.h>

namespace dist::detail {

int allowed_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

}  // namespace dist::detail
