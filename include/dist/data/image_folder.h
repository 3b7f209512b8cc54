// image_folder: a directory of images, one sub-folder per class, as a dataset (the layout of
// Keras' image_dataset_from_directory and torchvision's ImageFolder):
//
//   flowers/daisy/1.jpg  flowers/daisy/2.jpg  flowers/tulip/a.png ...
//
// Classes are the sub-folders in sorted order (label 0 is the first); images are the files
// below each (sub-folders and links to them followed; a folder reached twice in one class, as
// through a link loop, is a DataError naming the link) whose extension is .png, .jpg or .jpeg
// (any case). Each
// image file is a file of the source: AutoShardPolicy::kFile gives worker i the images i,
// i + N, ... of the sorted list.
#pragma once

#include <string>
#include <vector>

#include "dist/core/env.h"
#include "dist/data/dataset.h"
#include "dist/data/image_codec.h"

namespace dist::data {

struct ImageFolderOptions {
  // Every epoch lists the images in a new order, a function of (seed, epoch): a uniform
  // shuffle of the whole folder that holds only names, never images, in memory.
  bool shuffle = false;
  uint64_t seed = 0;
  // image_folder_files' elements are {encoded, label, file}, the file's path as uint8 bytes
  // (string_of in files.h), so that a later stage can name the file it could not use.
  bool with_source = false;
  // The file system the folder is listed and its images read through (env.h); not owned: it
  // must outlive the dataset and its iterators. A test passes one that injects faults.
  Env* env = Env::Default();
};

// The class names (sorted sub-folder names). Throws DataError naming the directory when it is
// missing, not a directory, or has no sub-folders.
std::vector<std::string> image_folder_classes(const std::string& directory,
                                              Env* env = Env::Default());

// Elements {encoded, label}: the file's bytes (uint8 [n]) and its class (int64 scalar), read
// when the element is reached (skipping one reads nothing). Throws DataError naming the
// directory when it has no sub-folders or no images in any of them.
Dataset image_folder_files(const std::string& directory, const ImageFolderOptions& options = {});

// Elements {image, label}: the images decoded to uint8 [C, H, W] (image_codec.h) on
// `num_parallel_calls` threads, in the files' order. A file that does not decode is a
// DataError naming it (follow with ignore_errors() to skip such files). Images of different
// sizes need decode.height/width (or a map) before batch().
Dataset image_folder(const std::string& directory, const DecodeImageOptions& decode = {},
                     const ImageFolderOptions& options = {}, int64_t num_parallel_calls = 1);

}  // namespace dist::data
