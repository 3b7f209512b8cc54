// A custom training loop made elastic with dist::run_elastic (dist/train/elastic.h): an MLP on
// Fashion-MNIST under MultiWorkerMirroredStrategy that goes on when a worker is lost and takes
// the worker back when it is started again, ending with the weights of a run that never changed
// size (the global batch stays 64 whatever the number of workers).
//
//   elastic_custom_loop STEPS MIN_WORKERS WEIGHTS.safetensors [TRAIN_EXAMPLES [float64]]
//
// float64 trains in double precision: over thousands of steps, float32's rounding (which
// differs with the number of workers, as the sums are taken in another order) grows until runs
// of different sizes differ in the second digit; in float64 they agree to about 1e-10, which is
// how tests/train/elastic_example_test.cc checks the weights against one worker's.
//
// Each worker runs the same command with its TF_CONFIG (dist-launch sets it, or see
// docs/elastic.md); the rendezvous store runs as dist-store-host (DIST_STORE_HOST, or the one
// built beside the library). Kill a worker: the others print "Elastic: sizes 3 -> 2 (lost
// worker:1)" and go on from the last commit. Start it again: it asks to join and is admitted at
// the next commit. The chief writes the final weights.
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "dist/data/mnist.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/train/checkpoint.h"
#include "dist/train/elastic.h"
#include "dist/train/loss.h"
#include "dist/train/safetensors.h"

namespace {

constexpr int64_t kGlobalBatch = 64;

torch::nn::Sequential make_mlp() {
  return torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(784, 128), torch::nn::ReLU(),
                               torch::nn::Linear(128, 10));
}

struct Args {
  int64_t steps = 0;
  int min_workers = 1;
  std::string weights;
  int64_t train_examples = 60000;
  bool float64 = false;
};

Args parse(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: elastic_custom_loop STEPS MIN_WORKERS WEIGHTS.safetensors "
                 "[TRAIN_EXAMPLES [float64]]"
              << std::endl;
    std::exit(2);
  }
  Args args;
  try {
    args.steps = std::stoll(argv[1]);
    args.min_workers = std::stoi(argv[2]);
    if (argc > 4) args.train_examples = std::stoll(argv[4]);
  } catch (const std::exception&) {
    std::cerr << "elastic_custom_loop: STEPS, MIN_WORKERS and TRAIN_EXAMPLES are integers"
              << std::endl;
    std::exit(2);
  }
  args.weights = argv[3];
  if (argc > 5) {
    if (std::string(argv[5]) != "float64") {
      std::cerr << "elastic_custom_loop: the fifth argument is float64 or nothing, got '" << argv[5]
                << "'" << std::endl;
      std::exit(2);
    }
    args.float64 = true;
  }
  return args;
}

// One generation: its strategy, a model and optimizer made afresh, the newest commit restored
// (a later generation's), then steps until the end or until workers wait to join.
void train_generation(dist::ElasticContext& elastic, const Args& args,
                      const dist::data::Dataset& examples) {
  dist::Strategy& strategy = elastic.strategy();
  torch::manual_seed(1);  // every generation starts from the same weights before its restore
  torch::nn::Sequential mlp = make_mlp();
  if (args.float64) mlp->to(torch::kFloat64);
  auto model = strategy.mirror(mlp);
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  dist::Checkpoint state(model, optimizer.get());
  elastic.track(state);  // a later generation's: the step and position of the newest commit
  dist::SparseCategoricalCrossentropy loss_fn(/*from_logits=*/true, dist::Reduction::kNone);
  auto data = strategy.experimental_distribute_dataset(examples);
  bool go_on = elastic.step() < args.steps;
  for (auto at = state.state.position; go_on; at = {at.epoch + 1, 0}) {
    auto it = data.iterator_at(at);
    for (const auto& batch : it) {
      strategy.run(
          [&](const dist::data::Element& b) {
            auto loss = dist::compute_average_loss(loss_fn(b[1], model->forward(b[0])));
            loss.backward();
            optimizer->apply_gradients();
          },
          batch);
      go_on = elastic.step_done(it.position(), args.steps);  // commits when due
      if (elastic.step() % 50 == 0 && elastic.chief())
        std::cout << "step " << elastic.step() << std::endl;
      if (!go_on) break;  // the last step, or workers wait to join
    }
  }
  if (elastic.regrouping() || !elastic.chief()) return;  // the next generation goes on
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  for (const auto& item : model.primary()->named_parameters())
    weights.emplace_back(item.key(), item.value());
  dist::save_safetensors(args.weights, weights);
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  auto examples =
      dist::data::fashion_mnist(dist::data::kFashionMnistDefaultDir, dist::data::Split::kTrain)
          .take(args.train_examples)
          .shuffle(args.train_examples, /*seed=*/5)
          .batch(kGlobalBatch, /*drop_remainder=*/true);
  if (args.float64)
    examples = examples.map([](dist::data::Element batch) {
      batch[0] = batch[0].to(torch::kFloat64);
      return batch;
    });
  dist::ElasticOptions options;
  options.min_workers = args.min_workers;
  options.commit_every = 10;
  // A worker that joins must take the same steps: it is refused if these differ.
  options.settings = {{"steps", std::to_string(args.steps)},
                      {"train_examples", std::to_string(args.train_examples)},
                      {"precision", args.float64 ? "float64" : "float32"}};
  try {
    const dist::ElasticResult result = dist::run_elastic(
        options, [&](dist::ElasticContext& elastic) { train_generation(elastic, args, examples); });
    if (result.took_part && result.chief) {
      std::cout << "Done: " << result.end.steps << " steps; workers per generation:";
      for (int size : result.worker_sizes) std::cout << " " << size;
      std::cout << std::endl;
    }
    return 0;
  } catch (const dist::InvalidArgument& e) {  // options that cannot make a job
    std::cerr << "elastic_custom_loop: " << e.what() << std::endl;
    return 2;
  } catch (const dist::ElasticJobStopped& e) {
    std::cerr << "elastic_custom_loop: " << e.what() << std::endl;
    return 5;
  } catch (const std::exception& e) {
    std::cerr << "elastic_custom_loop: " << e.what() << std::endl;
    return 1;
  }
}
