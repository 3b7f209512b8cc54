// OneDeviceStrategy: every variable and step on one device; a single replica.
//
// Useful to test a distributed training loop before spreading it out: the same code then runs
// under MirroredStrategy or MultiWorkerMirroredStrategy by changing only the strategy object.
//
// Threads. The replica runs on the thread that calls run(), with that thread's intra-op
// (OpenMP) threads. LibTorch's own default is one thread on some machines, so making the
// strategy sets the count, as dist-train does: to OneDeviceOptions::threads if set, else to
// every core this process may run on (its CPU affinity, as a launcher such as srun
// --cpu-bind or taskset left it) unless you chose already: OMP_NUM_THREADS or MKL_NUM_THREADS
// set, or at::set_num_threads called with a count other than LibTorch's default before the
// strategy is made (to keep exactly that default, say it in OneDeviceOptions::threads). The
// count holds for the making thread and every thread whose first tensor operation comes later;
// call at::set_num_threads after making the strategy to change it. The default strategy
// (get_default_strategy(), no strategy at all) leaves the count alone.
#pragma once

#include <string>

#include "dist/distribute/strategy.h"

namespace dist {

struct OneDeviceOptions {
  // "cpu:0" or another CPU device name (device_name.h). This build runs on CPUs only: a GPU
  // device is an InvalidArgument.
  std::string device = "cpu:0";
  // Intra-op threads of the replica (see above). 0: the process's cores unless you chose.
  int threads = 0;
};

class OneDeviceStrategy : public Strategy {
 public:
  // device: "cpu:0" (default) or another CPU device name, with the default threads.
  explicit OneDeviceStrategy(const std::string& device = "cpu:0");
  explicit OneDeviceStrategy(OneDeviceOptions options);
};

}  // namespace dist
