#include "dist/data/mnist.h"

#include <ATen/ATen.h>

#include <filesystem>

#include "dist/core/error.h"
#include "dist/data/idx_reader.h"

namespace dist::data {
namespace {

constexpr int64_t kMnistClasses = 10;

// What to do about a missing file: for the packaged data set, how to install it.
std::string missing_hint(const std::string& dir) {
  std::filesystem::path given(dir), packaged(kFashionMnistDefaultDir);
  if (given.lexically_normal() == packaged.lexically_normal() ||
      given.lexically_normal() == packaged.lexically_normal() / "") {
    return "; install it with: apt-get install dataset-fashion-mnist";
  }
  return "; pass the directory that holds the MNIST-format files train-images-idx3-ubyte, "
         "train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (each "
         "plain or .gz)";
}

// The path of `name` in `dir`, preferring the gzip file.
std::string find_file(const std::string& dir, const std::string& name, Env* env) {
  namespace fs = std::filesystem;  // paths joined here; the file system is env's
  fs::path gz = fs::path(dir) / (name + ".gz");
  if (env->file_exists(gz.string())) return gz.string();
  fs::path plain = fs::path(dir) / name;
  DIST_CHECK(env->file_exists(plain.string()), DataError, "neither ", gz.string(), " nor ",
             plain.string(), " exists", missing_hint(dir));
  return plain.string();
}

// The images as stored, uint8 [N, 1, 28, 28], and the labels int64 [N] (checked).
ImageLabelTensors load_mnist_bytes(const std::string& dir, Split split, Env* env,
                                   int64_t max_examples) {
  DIST_CHECK_ARG(max_examples >= -1, "max_examples is ", max_examples,
                 "; it must be -1 (every example) or at least 0");
  const auto read = [&](const std::string& path) {
    return max_examples < 0 ? read_idx(path, env) : read_idx_first(path, max_examples, env);
  };
  DIST_CHECK(env->file_info(dir).kind == FileKind::kDirectory, DataError, "MNIST-format directory ",
             dir, " does not exist", missing_hint(dir));
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string images_path = find_file(dir, prefix + "-images-idx3-ubyte", env);
  const std::string labels_path = find_file(dir, prefix + "-labels-idx1-ubyte", env);

  at::Tensor images = read(images_path);
  DIST_CHECK(images.scalar_type() == at::kByte && images.dim() == 3, DataError, images_path,
             " holds ", images.scalar_type(), " values of rank ", images.dim(),
             " but MNIST images are uint8 of rank 3 [N, rows, cols]");
  // Every MNIST-format set (MNIST, Fashion-MNIST, KMNIST, EMNIST) has 28x28 images, and the
  // models built for them rely on it.
  DIST_CHECK(images.size(1) == 28 && images.size(2) == 28, DataError, images_path, " holds ",
             images.size(1), "x", images.size(2),
             " images but MNIST-format images are 28x28; is it the right file?");
  at::Tensor labels = read(labels_path);
  DIST_CHECK(labels.scalar_type() == at::kByte && labels.dim() == 1, DataError, labels_path,
             " holds ", labels.scalar_type(), " values of rank ", labels.dim(),
             " but MNIST labels are uint8 of rank 1 [N]");
  DIST_CHECK(images.size(0) == labels.size(0), DataError, images_path, " holds ", images.size(0),
             " images but ", labels_path, " holds ", labels.size(0),
             " labels; the counts must be equal (are the files from the same split?)");
  if (labels.numel() > 0) {
    int64_t max_label = labels.max().item<int64_t>();
    if (max_label >= kMnistClasses) {
      int64_t index = labels.ge(kMnistClasses).nonzero()[0][0].item<int64_t>();
      throw DataError(::dist::detail::concat(labels_path, " holds label ",
                                             labels[index].item<int64_t>(), " at index ", index,
                                             "; labels must be 0 to ", kMnistClasses - 1));
    }
  }
  return {images.unsqueeze(1), labels.to(at::kLong)};
}

}  // namespace

ImageLabelTensors load_mnist_format(const std::string& dir, Split split, Env* env,
                                    int64_t max_examples) {
  ImageLabelTensors data = load_mnist_bytes(dir, split, env, max_examples);
  return {scale_images(data.images), data.labels};
}

Dataset fashion_mnist(const std::string& dir, Split split, Env* env, int64_t max_examples) {
  ImageLabelTensors data = load_mnist_format(dir, split, env, max_examples);
  return Dataset::from_tensor_slices({data.images, data.labels});
}

Dataset fashion_mnist_bytes(const std::string& dir, Split split, Env* env, int64_t max_examples) {
  ImageLabelTensors data = load_mnist_bytes(dir, split, env, max_examples);
  return Dataset::from_tensor_slices({data.images, data.labels});
}

Dataset mnist(const std::string& dir, Split split, Env* env, int64_t max_examples) {
  return fashion_mnist(dir, split, env, max_examples);
}

}  // namespace dist::data
