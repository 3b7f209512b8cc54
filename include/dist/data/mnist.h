// Loaders for MNIST and Fashion-MNIST in their original IDX files.
//
//   auto train = dist::data::fashion_mnist(dist::data::kFashionMnistDefaultDir, Split::kTrain);
//
// A directory holds train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte
// and t10k-labels-idx1-ubyte, each plain or with a .gz suffix (the .gz file wins if both
// exist).
#pragma once

#include <cstdint>
#include <string>

#include "dist/core/env.h"
#include "dist/data/dataset.h"
#include "dist/data/image_label_tensors.h"
// scale_images and scale_images_of, which the loaders use (they were declared here).
#include "dist/data/image_transforms.h"
#include "dist/data/split.h"

namespace dist::data {

// Where the Debian package dataset-fashion-mnist installs the data set.
constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

// Loads one split of an MNIST-format directory. Returns images float32 [N, 1, H, W] scaled
// from 0..255 to [0, 1] (28x28 for MNIST and Fashion-MNIST) and labels int64 [N] in 0..9.
// Throws dist::DataError naming the path if the directory or a file is missing or a file is
// corrupt (see read_idx), if the images are not uint8 of rank 3 or the labels not uint8 of
// rank 1, if the image and label counts differ, or if a label is 10 or more.
// Files are looked at and read through `env` (env.h).
//
// `max_examples` >= 0: the first max_examples of the split only (all when it holds fewer), as
// .take(max_examples) would give, but only their bytes are read, inflated and checked: a job
// that trains on 1,000 examples does not inflate 60,000 first.
ImageLabelTensors load_mnist_format(const std::string& dir, Split split, Env* env = Env::Default(),
                                    int64_t max_examples = -1);

// Datasets whose elements are {image [1, 28, 28], label []}: from_tensor_slices over
// load_mnist_format. The two are the same format; the names say which data is meant.
Dataset fashion_mnist(const std::string& dir, Split split, Env* env = Env::Default(),
                      int64_t max_examples = -1);
Dataset mnist(const std::string& dir, Split split, Env* env = Env::Default(),
              int64_t max_examples = -1);

// The same elements with the images as the files store them, uint8 [1, 28, 28]: a quarter of
// the memory (Fashion-MNIST's 60,000 training images are 47 MB instead of 188 MB in every worker
// process). Scale them after batching, where one conversion serves a whole batch and a shuffle
// buffer holds only views of the bytes (scale_images_of, image_transforms.h):
//
//   fashion_mnist_bytes(dir, Split::kTrain).shuffle(60000, seed).batch(64).map(scale_images_of)
//
// gives the same batches as fashion_mnist(...).shuffle(60000, seed).batch(64), bit for bit.
Dataset fashion_mnist_bytes(const std::string& dir, Split split, Env* env = Env::Default(),
                            int64_t max_examples = -1);

}  // namespace dist::data
