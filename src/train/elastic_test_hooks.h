// A test-only seam of elastic jobs (dist/train/elastic.h), kept out of ElasticOptions so that
// the options hold only what a user configures.
#pragma once

#include <functional>
#include <string>

namespace dist::detail {

// Called with "seen" when a worker of this process has seen a loss and with "agreed" once the
// survivors agreed on the next generation: tests kill a worker there (tests/tools/
// killed_train_main.cc). Process-wide, for the jobs that start after it is set; an empty
// function clears it. Not thread-safe: set it before any job starts.
void set_elastic_loss_hook(std::function<void(const std::string& stage)> hook);

}  // namespace dist::detail
