// A user's own program against the installed package (tests/install_consumer/run.sh builds it
// with CMake and with pkg-config): it links, runs a step, and runs on the package's allocator
// and on the cores it may use (one_device_strategy.h), with nothing set by hand.
#include <ATen/Parallel.h>
#include <sched.h>

#include <cstdlib>
#include <iostream>

#include "dist/core/allocator.h"
#include "dist/distribute/one_device_strategy.h"

int main() {
  dist::OneDeviceStrategy strategy;
  auto doubled = strategy.run([](int x) { return 2 * x; }, 21);
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const int cores = sched_getaffinity(0, sizeof(allowed), &allowed) == 0 ? CPU_COUNT(&allowed) : 0;
  // OMP_NUM_THREADS is the user's choice, which the strategy keeps.
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const int expected = omp != nullptr && *omp != '\0' ? std::atoi(omp) : cores;
  std::cout << "consumer: " << doubled[0] << " (malloc: " << dist::malloc_name() << ", threads "
            << at::get_num_threads() << " of " << cores << " cores)\n";
  return doubled[0] == 42 && at::get_num_threads() == expected ? 0 : 1;
}
