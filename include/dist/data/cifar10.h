// Loader for CIFAR-10 in its binary version (cifar-10-binary.tar.gz).
//
// A batch file is a sequence of 3073-byte records: one label byte (0..9), then a 32x32
// image as 1024 red, 1024 green and 1024 blue bytes, each plane row-major.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/core/env.h"
#include "dist/data/dataset.h"
#include "dist/data/image_label_tensors.h"
#include "dist/data/split.h"

namespace dist::data {

constexpr int64_t kCifar10RecordBytes = 1 + 3 * 32 * 32;

// Reads and concatenates the batch files in order (each plain or gzip). Returns images
// float32 [N, 3, 32, 32] scaled from 0..255 to [0, 1] and labels int64 [N]. Throws
// dist::InvalidArgument if `paths` is empty, and dist::DataError naming the file if one is
// missing, empty, not a whole number of records, or holds a label of 10 or more (the message
// gives the record index).
// Files are looked at and read through `env` (env.h).
ImageLabelTensors read_cifar10_batches(const std::vector<std::string>& paths,
                                       Env* env = Env::Default());

// Loads data_batch_1.bin .. data_batch_5.bin (kTrain) or test_batch.bin (kTest) from `dir`,
// or from `dir`/cifar-10-batches-bin if that folder exists (the layout the archive unpacks
// to). Throws dist::DataError naming the path if the directory or a file is missing.
ImageLabelTensors load_cifar10(const std::string& dir, Split split, Env* env = Env::Default());

// A dataset whose elements are {image [3, 32, 32], label []}.
Dataset cifar10(const std::string& dir, Split split, Env* env = Env::Default());

}  // namespace dist::data
