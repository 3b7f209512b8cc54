// Fuzzes dist::Checkpoint::read. The first byte picks how the rest is used:
//   bit 0 clear: as the file's bytes;
//   bit 0 set:   as a safetensors file whose checksums are sealed again before reading. CRC-32C
//                stops nearly every mutation at the checksum test; resealing lets the fuzzer
//                reach the checks behind it (objects, names, shapes, dtypes, optimizer slots,
//                metadata, random state);
//   bit 1 clear: read into Checkpoint(model, optimizer): Linear(3, 2) then BatchNorm1d(2) (for
//                parameters and buffers) with Adam;
//   bit 1 set:   read into a checkpoint of named objects, as a GAN's: two models, an SGD with
//                momentum and an Adam, each over its own model, and a tensor.
// A checkpoint that read() accepts must then train: one step of every optimizer must not throw.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include <torch/torch.h>

#include "dist/train/checkpoint.h"
#include "dist/train/safetensors.h"
#include "fuzz_util.h"
#include "train/checkpoint_checksums.h"

namespace {

struct Model {
  torch::nn::Sequential net{torch::nn::Linear(3, 2), torch::nn::BatchNorm1d(2)};
  torch::optim::Adam adam{net->parameters(), torch::optim::AdamOptions(1e-3)};
  dist::Checkpoint checkpoint{net.ptr(), &adam};

  void step() {
    adam.zero_grad();
    net->forward(torch::ones({4, 3})).sum().backward();
    adam.step();
  }
};

struct NamedObjects {
  torch::nn::Linear generator{torch::nn::Linear(3, 3)};
  torch::nn::Sequential discriminator{torch::nn::Linear(3, 2), torch::nn::BatchNorm1d(2)};
  torch::optim::SGD generator_optimizer{generator->parameters(),
                                        torch::optim::SGDOptions(0.1).momentum(0.9)};
  torch::optim::Adam discriminator_optimizer{discriminator->parameters(),
                                             torch::optim::AdamOptions(1e-3)};
  at::Tensor weight = torch::tensor({10.0});
  dist::Checkpoint checkpoint = dist::Checkpoint()
                                    .add("generator", generator)
                                    .add("discriminator", discriminator)
                                    .add("generator_optimizer", &generator_optimizer)
                                    .add("discriminator_optimizer", &discriminator_optimizer)
                                    .add("weight", weight);

  void step() {
    generator_optimizer.zero_grad();
    discriminator_optimizer.zero_grad();
    at::Tensor loss = discriminator->forward(generator->forward(torch::ones({4, 3}))).sum();
    (loss * weight).sum().backward();
    generator_optimizer.step();
    discriminator_optimizer.step();
  }
};

// Seals the checksums again with the writer's own code (train/checkpoint_checksums.h).
void reseal(const std::string& path, const std::string& bytes) {
  dist::fuzz::write_file(path, bytes);
  dist::SafetensorsFile file = dist::load_safetensors(path);
  dist::detail::seal_checkpoint(file.tensors, file.metadata);
  dist::save_safetensors(path, file.tensors, file.metadata);
}

std::string read_back(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

template <class Objects>
void write_seeds_of(const std::string& dir, const std::string& kind, char named_bit) {
  const std::string path = dir + "/tmp.safetensors";
  auto seed = [&](const std::string& name) {
    const std::string bytes = read_back(path);
    dist::fuzz::write_seed(dir, kind + name + "_raw", static_cast<char>(named_bit | 0) + bytes);
    dist::fuzz::write_seed(dir, kind + name + "_resealed",
                           static_cast<char>(named_bit | 1) + bytes);
  };
  Objects fresh;  // no optimizer state yet
  fresh.checkpoint.save_random_state = false;
  fresh.checkpoint.write(path);
  seed("fresh");
  Objects trained;
  trained.step();
  trained.checkpoint.state.step = 1;
  trained.checkpoint.state.epoch = 2;
  trained.checkpoint.state.position = {2, 40};
  trained.checkpoint.state.values = {{"loss_sum", "1.5"}, {"flag", ""}};
  trained.checkpoint.write(path);
  seed("trained");
  std::remove(path.c_str());
}

void write_seeds(const std::string& dir) {
  write_seeds_of<Model>(dir, "", 0);  // the seeds' names before named objects, kept
  write_seeds_of<NamedObjects>(dir, "named_", 2);
}

template <class Objects>
void read_and_train(const std::string& path) {
  Objects objects;
  dist::fuzz::expect_only_dist_errors([&] {
    objects.checkpoint.read(path);
    objects.step();
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dist::fuzz::write_seeds_if_asked(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string& path = dist::fuzz::scratch_path("checkpoint");
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 1) {
    try {
      reseal(path, bytes);
    } catch (const dist::Error&) {
      return 0;  // not a safetensors file: the safetensors target covers those
    }
  } else {
    dist::fuzz::write_file(path, bytes);
  }
  if (data[0] & 2)
    read_and_train<NamedObjects>(path);
  else
    read_and_train<Model>(path);
  return 0;
}
