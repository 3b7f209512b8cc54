// A dense layer's forward and backward (batch 64, 4096 -> 4096, the MLP's middle layer).
// Run it under each BLAS (bench/run_blas_comparison.sh) to see what OpenBLAS buys.
//
//   ./build/bench/dense_layer_bench [rounds=7] [iterations=5]
#include <cstdio>
#include <cstdlib>

#include <torch/torch.h>

#include "interleaved_timer.h"

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  int iterations = argc > 2 ? std::atoi(argv[2]) : 5;
  torch::manual_seed(0);
  torch::nn::Linear dense(4096, 4096);
  auto x = torch::rand({64, 4096});
  auto step = [&] {
    dense->zero_grad();
    dense->forward(x).sum().backward();
  };
  auto medians = dist::bench::interleaved_medians({{"dense", step}}, rounds, iterations, 1);
  std::printf("dense 64x4096x4096 forward+backward: %.3f ms (median, %d threads)\n",
              medians[0] * 1e3, torch::get_num_threads());
  return 0;
}
