// What the tests of Keras layers share (image_layers_test.cc, dropout_test.cc): a model of one
// layer, and a check that a message contains a part, which prints the whole message if not.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "dist/keras/functional.h"

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "\"" << (text) << "\""

namespace dist::keras::layer_testing {

// A model of one layer on `shape`, with its parameters in training mode.
inline Functional one_layer(const Shape& shape, const Layer& layer) {
  KerasTensor input = Input(shape);
  return Functional(input, layer(input));
}

}  // namespace dist::keras::layer_testing
