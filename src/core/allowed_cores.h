// The CPUs this process may run on: what a launcher that binds processes (srun --cpu-bind,
// mpirun --bind-to) left it, else the host's.
#pragma once

namespace dist::detail {

// The CPUs of this process's affinity mask, or 0 if it cannot be read.
int allowed_cores();

}  // namespace dist::detail
