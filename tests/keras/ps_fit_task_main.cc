// One task of a ParameterServerStrategy job for ps_fit_test.cc: the same binary runs as chief,
// worker and ps, and each calls Model::fit, as a user's program would. Reads TF_CONFIG.
//
//   dist_test_ps_fit_task EPOCHS STEPS_PER_EPOCH OUT
//
// The Keras tutorial CNN (seed 7), SGD(0.1), fitted on equivalence_data() with the same data as
// validation. The chief prints each epoch's logs ("history <key> <epoch> <value>", 17 digits)
// and writes the final weights to OUT; the others print how many epochs their History holds.
// STEPS_PER_EPOCH -1 leaves it unset (fit must refuse that). DIST_TEST_TIMEOUT_MS bounds every
// wait (rpc, startup and coordinator timeouts); DIST_TEST_BACKUP_SAVE_FREQ=N adds a
// BackupAndRestore(OUT.backup, save_freq N).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "dist/core/error.h"
#include "dist/distribute/parameter_server_strategy.h"
#include "dist/keras/callbacks.h"
#include "dist/keras/model.h"
#include "dist/models/keras_models.h"
#include "equivalence_data.h"

namespace {

int run(int epochs, int64_t steps_per_epoch, const std::string& out) {
  dist::ParameterServerOptions options;
  const char* timeout_ms = std::getenv("DIST_TEST_TIMEOUT_MS");
  const auto timeout = std::chrono::milliseconds(timeout_ms ? std::atoll(timeout_ms) : 20000);
  options.rpc_timeout = options.startup_timeout = options.coordinator_timeout = timeout;
  dist::ParameterServerStrategy strategy(options);
  torch::manual_seed(7);
  dist::keras::Model model = dist::models::keras_tutorial_cnn();
  model.compile(strategy, dist::keras::optimizers::SGD(0.1),
                dist::SparseCategoricalCrossentropy(true), {"accuracy"});
  dist::keras::FitOptions fit;
  fit.epochs = epochs;
  fit.steps_per_epoch = steps_per_epoch;
  fit.validation_data = dist::testing::equivalence_data();
  fit.verbose = 0;
  if (const char* save_freq = std::getenv("DIST_TEST_BACKUP_SAVE_FREQ"))
    fit.callbacks.push_back(std::make_shared<dist::keras::callbacks::BackupAndRestore>(
        out + ".backup", std::atoll(save_freq)));
  const dist::keras::History history = model.fit(dist::testing::equivalence_data(), fit);
  if (!model.is_chief()) {
    std::cout << "served; history epochs " << history.epoch.size() << std::endl;
    return 0;
  }
  for (const auto& [key, values] : history.history)
    for (size_t e = 0; e < values.size(); ++e)
      std::printf("history %s %zu %.17g\n", key.c_str(), e, values[e]);
  std::printf("global step %lld\n", static_cast<long long>(model.global_step()));
  std::fflush(stdout);
  model.save_weights(out);  // read from the ps tasks
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: dist_test_ps_fit_task EPOCHS STEPS_PER_EPOCH OUT" << std::endl;
    return 2;
  }
  try {
    return run(std::atoi(argv[1]), std::atoll(argv[2]), argv[3]);
  } catch (const dist::InvalidArgument& e) {
    std::cerr << "invalid argument: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
