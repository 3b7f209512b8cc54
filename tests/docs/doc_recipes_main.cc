// ctest docs_recipes: the skeletons of docs/how-to-extend.md's recipes, compiled from the page's
// text (tests/docs/recipe_blocks.py writes doc_recipes_blocks.h) and run here on small inputs.
// A recipe naming a renamed API fails to compile at the page's line; one whose skeleton no
// longer works fails here, naming the recipe and the values.
#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "dist/data/image_codec.h"
#include "dist/distribute/mirrored_strategy.h"
#include "doc_recipes_blocks.h"

namespace {

int failures = 0;

void expect(bool ok, const std::string& recipe, const std::string& what) {
  if (ok) return;
  std::cerr << "docs/how-to-extend.md, recipe '" << recipe << "': " << what << "\n";
  ++failures;
}

// A folder of its own under the system's temporary folder, removed at exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "doc_recipes.XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
};

std::vector<std::string> lines(const dist::data::Dataset& dataset) {
  std::vector<std::string> out;
  for (const auto& element : dataset.iterator(0))
    out.push_back(dist::data::string_of(element["line"]));
  return out;
}

void data_source() {
  TempDir dir;
  const std::string a = dir.write("a.txt", "one\ntwo\n");
  const std::string b = dir.write("b.txt", "three");
  const auto dataset = dist::data::lines_dataset({a, b});
  const std::vector<std::string> all = {"one", "two", "three"};
  expect(lines(dataset) == all, "data-source", "the lines of a.txt and b.txt, in order");
  // What AutoShardPolicy::kFile does for a worker: the same source over its files only.
  const auto* source =
      dynamic_cast<const dist::data::detail::FileSourceNode*>(dataset.node().get());
  expect(source != nullptr, "data-source", "lines_dataset is a FileSourceNode");
  if (source) {
    const auto second = dist::data::Dataset(source->with_files({b}));
    expect(lines(second) == std::vector<std::string>{"three"}, "data-source", "with_files({b})");
  }
}

void image_codec() {
  using namespace dist::data::detail;
  const at::Tensor rgb = at::arange(2 * 3 * 3, at::kByte).reshape({3, 2, 3});  // [C, H, W]
  const std::string bytes = encode_ppm(rgb);
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  expect(is_ppm(data, bytes.size()), "image-codec", "is_ppm of encode_ppm's bytes");
  const std::string source = "test.ppm";
  const at::Tensor hwc = decode_ppm_hwc({data, bytes.size(), 0, &source});
  expect(hwc.permute({2, 0, 1}).equal(rgb), "image-codec", "decode(encode(x)) == x, RGB");
  const at::Tensor grey = decode_ppm_hwc({data, bytes.size(), 1, &source});
  expect(grey.sizes() == at::IntArrayRef({2, 3, 1}) &&
             grey[0][1][0].item<uint8_t>() == grey_of(1, 7, 13),
         "image-codec", "RGB to grey by grey_of");
  bool named = false;
  try {
    decode_ppm_hwc({data, bytes.size() - 1, 0, &source});
  } catch (const dist::DataError& e) {
    named = std::string(e.what()).find("test.ppm: the PPM is truncated") != std::string::npos;
  }
  expect(named, "image-codec", "a truncated file is a DataError naming it");
}

void collective_backend() {
  dist::collective::SoloTransport transport;
  at::Tensor input = at::arange(4, at::kFloat);
  std::vector<at::Tensor> outputs = {at::zeros({4})};
  transport.all_gather(input, &outputs)->wait();
  expect(outputs[0].equal(input), "collective-backend", "all_gather of one member");
  std::vector<at::Tensor> values = {input.clone()};
  transport.all_reduce(values, dist::ReduceOp::kSum)->wait();
  expect(values[0].equal(input), "collective-backend", "all_reduce of one member");
  expect(dist::collective::kSoloMaker == &dist::collective::make_solo_transport,
         "collective-backend", "the maker has the factory's type");
}

void strategy() {
  dist::SoloStrategy strategy;
  auto model = strategy.mirror(torch::nn::Linear(torch::nn::LinearOptions(1, 1).bias(false)));
  {
    torch::NoGradGuard no_grad;
    model->weight.fill_(1.0);
  }
  torch::optim::SGD sgd(model.variables().trainable_variables(), torch::optim::SGDOptions(0.5));
  // loss = w * 2, summed over the replicas of the step: dloss/dw = 2, w = 1 - 0.5 * 2 = 0.
  strategy.run([&] {
    at::Tensor loss = model->forward(at::full({1, 1}, 2.0)).sum();
    loss = dist::get_replica_context()->all_reduce(dist::ReduceOp::kSum, loss);
    loss.backward();
  });
  strategy.extended().apply_gradients(model.variables(), sgd);
  expect(model.primary()->weight.item<float>() == 0.0f, "strategy", "one SGD step: w 1 -> 0");
  expect(strategy.name() == "solo" && strategy.num_replicas_in_sync() == 1, "strategy", "name");
}

void layer() {
  GlobalCentering centering;
  // Outside run(): the batch's own mean.
  const at::Tensor alone = centering->forward(at::tensor({1.0f, 3.0f}).reshape({2, 1}));
  expect(alone.equal(at::tensor({-1.0f, 1.0f}).reshape({2, 1})), "layer", "outside run()");
  // Two replicas: rows {1, 2} and {3, 4} (and {} as a third replica's) centred on 2.5.
  dist::MirroredStrategy two(std::vector<std::string>{"cpu:0", "cpu:1", "cpu:2"});
  dist::PerReplica<at::Tensor> rows({at::tensor({1.0f, 2.0f}).reshape({2, 1}),
                                     at::tensor({3.0f, 4.0f}).reshape({2, 1}), at::zeros({0, 1})});
  const auto out = two.run([&](const at::Tensor& x) { return centering->forward(x); }, rows);
  const at::Tensor all = at::cat(two.experimental_local_results(out));
  expect(all.equal(at::tensor({-1.5f, -0.5f, 0.5f, 1.5f}).reshape({4, 1})), "layer",
         "three replicas centred on the global mean 2.5");
}

}  // namespace

int main() {
  for (auto [name, run] : {std::pair{"data-source", &data_source},
                           {"image-codec", &image_codec},
                           {"collective-backend", &collective_backend},
                           {"strategy", &strategy},
                           {"layer", &layer}}) {
    try {
      run();
    } catch (const std::exception& e) {
      expect(false, name, std::string("threw: ") + e.what());
    }
  }
  if (failures == 0) std::cout << "docs/how-to-extend.md: 5 recipes compiled and ran\n";
  return failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
