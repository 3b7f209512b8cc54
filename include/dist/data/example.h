// tf.train.Example: the record format of TFRecord data sets, written and parsed from its
// specification (tensorflow/core/example/example.proto and feature.proto):
//
//   Example   { Features features = 1; }
//   Features  { map<string, Feature> feature = 1; }   // an entry: { string key = 1; Feature value
//   = 2; } Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
//                            Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }
//   FloatList { repeated float value = 1 [packed = true]; }
//   Int64List { repeated int64 value = 1 [packed = true]; }
//
// Writing:
//   ExampleBuilder b;
//   b.add_bytes("image/encoded", jpeg_bytes);
//   b.add_int64("image/class/label", 7);
//   writer.write(b.serialize());
// Reading (one tensor per spec entry, in spec order, named by the spec's feature names):
//   const FeatureSpec spec({FixedLenFeature{"image/encoded", FeatureType::kBytes, {}},
//                           FixedLenFeature{"image/class/label", FeatureType::kInt64, {}}});
//   Element e = parse_example(record, spec);  // {uint8 [n] of the JPEG, int64 []}
//   e["image/class/label"]                    // the same as e[1]
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/data/dataset.h"

namespace dist::data {

// Builds one serialized tf.train.Example. The output is deterministic: features sorted by name,
// repeated numbers packed (what TensorFlow writes too, though its map order is unspecified).
// Not thread-safe.
class ExampleBuilder {
 public:
  // Each adds a feature; a name already added throws InvalidArgument (an Example maps each
  // name to one feature). Empty lists are allowed (TensorFlow reads them as 0 values).
  ExampleBuilder& add_int64(const std::string& name, std::vector<int64_t> values);
  ExampleBuilder& add_float(const std::string& name, std::vector<float> values);
  ExampleBuilder& add_bytes(const std::string& name, std::vector<std::string> values);
  // One value.
  ExampleBuilder& add_int64(const std::string& name, int64_t value);
  ExampleBuilder& add_float(const std::string& name, float value);
  ExampleBuilder& add_bytes(const std::string& name, std::string_view value);

  // The Example in the protocol-buffer wire format.
  std::string serialize() const;

 private:
  struct Values {
    int kind = 0;  // the Feature's field number: 1 bytes, 2 float, 3 int64
    std::vector<int64_t> int64s;
    std::vector<float> floats;
    std::vector<std::string> bytes;
  };
  void add(const std::string& name, Values values);
  std::vector<std::pair<std::string, Values>> features_;  // sorted by name
};

enum class FeatureType { kInt64, kFloat, kBytes };
// "int64", "float" or "bytes".
const char* feature_type_name(FeatureType type);

// A feature with a fixed number of values, reshaped to `shape`: kInt64 gives an int64 tensor,
// kFloat a float32 tensor. kBytes takes shape {} or {1} (one byte string) and gives a 1-D
// uint8 tensor of its bytes (how encoded images and text travel). If the example lacks the
// feature, a copy of `default_value` is returned (it must have the feature's dtype and shape;
// for kBytes a 1-D uint8 tensor); without one, a missing feature is a DataError.
struct FixedLenFeature {
  // A constructor rather than an aggregate, so that FixedLenFeature{"label", kInt64, {}}
  // compiles without -Wmissing-field-initializers warnings.
  FixedLenFeature(std::string name, FeatureType type, std::vector<int64_t> shape = {},
                  std::optional<at::Tensor> default_value = std::nullopt)
      : name(std::move(name)),
        type(type),
        shape(std::move(shape)),
        default_value(std::move(default_value)) {}

  std::string name;
  FeatureType type;
  std::vector<int64_t> shape;
  std::optional<at::Tensor> default_value;
};

// A feature with any number of values: a 1-D tensor of all of them (a missing feature gives an
// empty one). kInt64 and kFloat only: a list of several byte strings has no one-tensor form
// here (tf.io.VarLenFeature gives a SparseTensor of strings), so kBytes is refused.
struct VarLenFeature {
  VarLenFeature(std::string name, FeatureType type) : name(std::move(name)), type(type) {}

  std::string name;
  FeatureType type;
};

// What parse_example extracts: a list of features, checked once here rather than per record.
// Throws InvalidArgument for an empty or repeated name, a negative dimension, a kBytes
// FixedLenFeature whose shape is not {} or {1}, a VarLenFeature of kBytes, or a default value
// of the wrong dtype or shape. Immutable after construction, so thread-safe to share.
class FeatureSpec {
 public:
  using Entry = std::variant<FixedLenFeature, VarLenFeature>;
  explicit FeatureSpec(std::vector<Entry> entries);

  size_t size() const { return data_->entries.size(); }
  const std::vector<Entry>& entries() const { return data_->entries; }
  // The index of the entry named `name`, or -1.
  int64_t find(std::string_view name) const;
  // The entries' names in spec order, shared by every Element parse_example gives.
  const Element::Names& names() const { return data_->names; }

 private:
  struct Data {
    std::vector<Entry> entries;
    std::unordered_map<std::string_view, int64_t> index;  // views of the names in entries
    Element::Names names;
  };
  // Shared and immutable: copies are cheap, and the index's views stay valid in every copy.
  std::shared_ptr<const Data> data_;
};

// Parses a serialized tf.train.Example and returns one CPU tensor per spec entry, in spec order
// and named by the entries' names, so e["label"] reads as e[i] (see FixedLenFeature and
// VarLenFeature for dtypes and shapes). Follows protocol-buffer
// semantics: fields in any order, unknown fields skipped, packed or unpacked numbers, a map
// entry repeated for a name means the last one wins, and a Feature whose kind field appears
// more than once holds the concatenation of the values (a kind of another type replaces the
// earlier values). A Feature with no kind set counts as an empty list of the requested type.
//
// Throws DataError for a malformed message (naming the byte offset), and, naming the feature:
// a missing feature without a default ("feature 'image/class/label' is missing (the example
// has: a, b, c)"), a feature of another type than the spec's, or a FixedLenFeature with another
// number of values than its shape holds. The bytes are only read during the call.
// Thread-safe.
Element parse_example(std::string_view serialized, const FeatureSpec& spec);

}  // namespace dist::data
