// Random image augmentation that is reproducible, resumable and independent of the replica
// and worker counts: the preprocessing of TensorFlow's CycleGAN tutorial (random jitter,
// random mirroring, scaling to [-1, 1]) as Dataset::map_with_context functions. Every random
// decision is a pure function of (seed, the transform's kind, epoch, index, row); the
// functions hold no mutable state (any thread).
//
//   auto train = fashion_mnist(kFashionMnistDefaultDir, Split::kTrain)  // {[1,28,28], label}
//                    .map_with_context(compose({random_jitter(/*seed=*/1, 34, 28),
//                                               random_flip_left_right(/*seed=*/2),
//                                               normalize_to_unit_range(0, 1)}))
//                    .shuffle(60000, 3).batch(64);
//
// Where to apply them (after cache(), before shuffle) and why: docs/guide.md, "Random
// augmentation".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "dist/data/dataset.h"

namespace dist::data {

// A function for Dataset::map_with_context.
using ElementTransform = std::function<Element(Element, const ElementContext&)>;

enum class Interpolation {
  // Each output pixel copies the input pixel under its centre (tf.image.resize's "nearest",
  // with half-pixel centres). Works on every dtype.
  kNearest,
  // Bilinear with half-pixel centres (align_corners=false, as tf.image.resize). Needs a
  // floating-point image.
  kBilinear,
};

// Resizes the image to resize_to x resize_to, then crops a crop_to x crop_to window at a
// random offset (each offset from 0 to resize_to - crop_to is equally likely, independently
// for rows and columns). resize_to == crop_to only resizes. Same dtype out as in.
// Throws InvalidArgument naming random_jitter and the value if crop_to < 1 or
// crop_to > resize_to (checked here), or, when applied, if the component is missing, is not
// [C, H, W] or [N, C, H, W], or kBilinear meets an integer image.
ElementTransform random_jitter(uint64_t seed, int64_t resize_to, int64_t crop_to,
                               Interpolation interpolation = Interpolation::kNearest,
                               size_t component = 0);

// Mirrors the image left to right (reverses the last dimension) with probability 1/2.
// Throws InvalidArgument naming random_flip_left_right when applied to a missing component or
// an image that is not [C, H, W] or [N, C, H, W].
ElementTransform random_flip_left_right(uint64_t seed, size_t component = 0);

// Maps [low, high] linearly onto [-1, 1]: low gives exactly -1 and high exactly 1. Use (0, 255)
// for raw bytes and (0, 1) for images loaded by mnist.h / cifar10.h. Integer images become
// float32; floating images keep their dtype. Values outside [low, high] are not clamped.
// Throws InvalidArgument naming normalize_to_unit_range and the values unless low < high and
// both are finite (checked here), or when applied to a missing component.
ElementTransform normalize_to_unit_range(double low, double high, size_t component = 0);

// Applies the transforms in order, each with the element's context.
// Throws InvalidArgument if a transform is empty.
ElementTransform compose(std::vector<ElementTransform> transforms);

// The 64-bit key behind a transform's decisions for one image: a splitmix64 chain over
// (seed, salt, context.epoch, context.index, row). Exposed so that user transforms can draw
// their randomness the same way; use a salt of your own for each kind of decision.
uint64_t augment_key(uint64_t seed, uint64_t salt, const ElementContext& context, int64_t row = 0);

}  // namespace dist::data
