// Which part of a data set to load: the training or the test examples.
#pragma once

#include <string>

namespace dist::data {

enum class Split { kTrain, kTest };

// "train" or "test".
inline std::string to_string(Split split) { return split == Split::kTrain ? "train" : "test"; }

}  // namespace dist::data
