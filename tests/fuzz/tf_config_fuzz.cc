// Fuzzes dist::parse_tf_config, then uses what it accepted the way the strategies do.
#include <string>

#include "dist/distribute/cluster_spec.h"
#include "fuzz_util.h"

// The seeds are checked in (tests/fuzz/corpus/tf_config): JSON reads better in a file.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dist::fuzz::write_seeds_if_asked([](const std::string&) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  dist::fuzz::expect_only_dist_errors([&] {
    const dist::ClusterConfig config = dist::parse_tf_config(text);
    // A validated config must answer these without surprises.
    const dist::ClusterSpec& cluster = config.cluster;
    (void)cluster.address(config.task).to_string();
    (void)cluster.store_address();
    for (const dist::TaskSpec& task : cluster.collective_tasks()) {
      (void)cluster.address(task);
      (void)cluster.collective_rank(task);
    }
    // A ClusterSpec rebuilt from the parsed jobs validates the same way.
    (void)dist::ClusterSpec(cluster.jobs());
  });
  return 0;
}
