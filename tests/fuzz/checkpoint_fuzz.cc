// Fuzzes dist::Checkpoint::read into a small fixed model (Linear(3, 2) then BatchNorm1d(2), for
// parameters and buffers) with an Adam optimizer. The first byte picks how the rest is used:
//   even: as the file's bytes;
//   odd:  as a safetensors file whose checksums are recomputed before reading. CRC-32C stops
//         nearly every mutation at the checksum test; resealing lets the fuzzer reach the
//         checks behind it (names, shapes, dtypes, optimizer slots, metadata, random state).
// A checkpoint that read() accepts must then train: one Adam step on it must not throw.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include <torch/torch.h>

#include "core/crc32c.h"
#include "dist/train/checkpoint.h"
#include "dist/train/safetensors.h"
#include "fuzz_util.h"

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

std::string hex(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", value);
  return text;
}

// Recomputes the checksums the way Checkpoint::write does (src/train/checkpoint.cc). A drift
// between the two fails no test but leaves the odd inputs stuck at the checksum: the seeds'
// coverage report would show it.
void reseal(const std::string& path, const std::string& bytes) {
  dist::fuzz::write_file(path, bytes);
  dist::SafetensorsFile file = dist::load_safetensors(path);
  auto& meta = file.metadata;
  for (const auto& [name, t] : file.tensors) {
    at::Tensor c = t.contiguous();
    meta["crc32c/" + name] = hex(dist::crc32c(c.data_ptr(), c.numel() * c.element_size()));
  }
  std::ostringstream text;
  for (const auto& [name, t] : file.tensors)
    text << name << '\0' << t.scalar_type() << t.sizes() << '\0';
  for (const auto& [key, value] : meta)
    if (key != "header_crc32c") text << key << '\0' << value << '\0';
  const std::string header = text.str();
  meta["header_crc32c"] = hex(dist::crc32c(header.data(), header.size()));
  dist::save_safetensors(path, file.tensors, meta);
}

std::string read_back(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_seeds(const std::string& dir) {
  const std::string path = dir + "/tmp.safetensors";
  auto seed = [&](const std::string& name) {
    const std::string bytes = read_back(path);
    dist::fuzz::write_seed(dir, name + "_raw", '\0' + bytes);
    dist::fuzz::write_seed(dir, name + "_resealed", '\1' + bytes);
  };
  Model fresh;  // no optimizer state yet
  fresh.checkpoint.save_random_state = false;
  fresh.checkpoint.write(path);
  seed("fresh");
  Model trained;
  trained.step();
  trained.checkpoint.state.step = 1;
  trained.checkpoint.state.epoch = 2;
  trained.checkpoint.state.position = {2, 40};
  trained.checkpoint.state.values = {{"loss_sum", "1.5"}, {"flag", ""}};
  trained.checkpoint.write(path);
  seed("trained");
  std::remove(path.c_str());
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
  Model model;
  dist::fuzz::expect_only_dist_errors([&] {
    model.checkpoint.read(path);
    model.step();
  });
  return 0;
}
