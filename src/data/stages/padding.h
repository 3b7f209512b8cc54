// Padding a batch of elements that differ in shape: what padded_batch (padded_batch.cc, where
// it is implemented) and bucket_by_sequence_length (bucket_by_sequence_length.cc) share.
#pragma once

#include <ATen/core/Scalar.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dist/data/element.h"

namespace dist::data::detail {

// What every padded batch of one stage shares.
struct PadSpec {
  std::vector<std::vector<int64_t>> shapes;  // per component; empty: all -1
  std::vector<at::Scalar> values;            // per component; empty: 0
  const char* stage = "padded_batch";        // names the stage in errors
};

// InvalidArgument naming the stage unless every padded dimension is a size or -1.
void check_pad_spec(const PadSpec& spec);

// The batch of `elements` (at least one) padded as the file comment of padded_batch.cc says.
// `unknown`, if at least 0, replaces -1 in the padded shapes (pad_to_bucket_boundary).
// InvalidArgument naming the element and component for a mismatch of arity, rank or dtype, or
// an element larger than its padded shape.
Element pad_elements(const std::vector<Element>& elements, const PadSpec& spec,
                     int64_t unknown = -1);

// ", padded_shapes=[...], padding_values=[...]" for those given: a stage's call() text.
std::string describe_spec(const PadSpec& spec);

}  // namespace dist::data::detail
