// dist-train's image flags: the channels, the size every image is brought to and how, the
// classes, the augmentation and the normalization (tools/training_data.h applies them). Parsed
// here from their spellings, checked with the other options in check_options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace dist::tools {

// How an image of another size is brought to --image-size HxW, as torchvision and Keras do it.
enum class ResizePolicy {
  kResize,  // resized to HxW (antialiased bilinear), its aspect ratio changed
  kCrop,    // the shorter side resized to fit, then the centre HxW cropped (aspect kept)
};

struct ImageOptions {
  // 1 (grey) or 3 (RGB); 0: what --model-file takes (tried by the start-up forward), else the
  // first training image's.
  int64_t channels = 0;
  // Every image brought to height x width; 0 x 0: the first training image's size, which every
  // image must then have.
  int64_t height = 0;
  int64_t width = 0;
  ResizePolicy resize_policy = ResizePolicy::kResize;
  // The classes the model tells apart; 0: from the data (an image folder's class folders, the
  // largest TFRecord label + 1, Fashion-MNIST's 10).
  int64_t num_classes = 0;
  // --augment: random flips left to right; random resized crops (torchvision's
  // RandomResizedCrop) instead of the resize policy. Training data only.
  bool flip = false;
  bool crop = false;
  // --normalize: (x - mean[c]) / std[c] per channel after scaling to [0, 1]; empty: none.
  std::vector<double> mean;
  std::vector<double> std;

  bool sized() const { return height > 0; }
  bool normalized() const { return !mean.empty(); }
};

// The flags' texts as given, turned into ImageOptions by finish_image_options.
struct ImageFlagTexts {
  std::string image_size;
  std::string resize_policy = "resize";
  std::string augment;
  std::string normalize;
};

void add_image_flags(CLI::App& app, ImageOptions& options, ImageFlagTexts& texts);

// InvalidArgument naming the flag for a value that is not one.
void finish_image_options(ImageOptions& options, const ImageFlagTexts& texts);

// "flip,crop" / "" and "0.485,0.456,0.406/0.229,0.224,0.225" as the flags spell them.
std::string augment_spelling(const ImageOptions& options);
std::string normalize_spelling(const ImageOptions& options);

}  // namespace dist::tools
