#include <iostream>

#include "dist/core/allocator.h"
#include "dist/distribute/one_device_strategy.h"

int main() {
  dist::OneDeviceStrategy strategy;
  auto doubled = strategy.run([](int x) { return 2 * x; }, 21);
  std::cout << "consumer: " << doubled[0] << " (malloc: " << dist::malloc_name() << ")\n";
  return doubled[0] == 42 ? 0 : 1;
}
