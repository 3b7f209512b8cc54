#include "dist/data/example.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "core/protobuf_wire.h"
#include "data/dataset_node.h"
#include "dist/core/error.h"
#include "dist/core/printable.h"
#include "dist/data/files.h"

namespace dist::data {
namespace {

// The field numbers of Feature's oneof, which are also the kinds a feature can hold.
constexpr uint32_t kBytesList = 1;
constexpr uint32_t kFloatList = 2;
constexpr uint32_t kInt64List = 3;

uint32_t kind_for(FeatureType type) {
  switch (type) {
    case FeatureType::kBytes:
      return kBytesList;
    case FeatureType::kFloat:
      return kFloatList;
    case FeatureType::kInt64:
      return kInt64List;
  }
  return 0;
}

const char* kind_name(uint32_t kind) {
  return kind == kBytesList   ? "bytes (bytes_list)"
         : kind == kFloatList ? "float (float_list)"
                              : "int64 (int64_list)";
}

// The Features message's entries, each a Reader over one map entry, in order.
template <class Fn>
void for_each_entry(std::string_view serialized, Fn&& fn) {
  wire::Reader example(serialized, "tf.train.Example");
  while (!example.done()) {
    const wire::Key key = example.read_key();
    if (key.field != 1 || key.type != wire::kLengthDelimited) {
      example.skip(key.type);
      continue;
    }
    // A repeated embedded message merges: a second `features` adds its entries.
    wire::Reader features = example.read_message("tf.train.Example (its Features)");
    while (!features.done()) {
      const wire::Key k = features.read_key();
      if (k.field == 1 && k.type == wire::kLengthDelimited)
        fn(features.read_message("tf.train.Example (a Features map entry)"));
      else
        features.skip(k.type);
    }
  }
}

// A map entry's key (the last one if repeated; "" if absent, the proto default).
std::string_view entry_key(wire::Reader entry) {
  std::string_view key;
  while (!entry.done()) {
    const wire::Key k = entry.read_key();
    if (k.field == 1 && k.type == wire::kLengthDelimited)
      key = entry.read_length_delimited();
    else
      entry.skip(k.type);
  }
  return key;
}

// Calls fn(kind, list) for every list a map entry's value holds, in order: the entry's value
// field may repeat (messages merge) and so may the Feature's kind fields.
template <class Fn>
void for_each_list(wire::Reader entry, Fn&& fn) {
  while (!entry.done()) {
    const wire::Key k = entry.read_key();
    if (k.field != 2 || k.type != wire::kLengthDelimited) {
      entry.skip(k.type);
      continue;
    }
    wire::Reader feature = entry.read_message("tf.train.Example (a Feature)");
    while (!feature.done()) {
      const wire::Key f = feature.read_key();
      if (f.field >= kBytesList && f.field <= kInt64List && f.type == wire::kLengthDelimited)
        fn(f.field, feature.read_message("tf.train.Example (a value list)"));
      else
        feature.skip(f.type);
    }
  }
}

// Calls on_packed(bytes) for each packed run and on_one(reader) for each unpacked value of a
// list's field 1; skips other fields.
template <class Packed, class One>
void for_each_value_field(wire::Reader list, wire::WireType unpacked, Packed&& on_packed,
                          One&& on_one) {
  while (!list.done()) {
    const wire::Key k = list.read_key();
    if (k.field == 1 && k.type == wire::kLengthDelimited)
      on_packed(list);
    else if (k.field == 1 && k.type == unpacked)
      on_one(list);
    else
      list.skip(k.type);
  }
}

// The values of one feature: the kind of its last list, and where the run of lists of that
// kind begins (an earlier list of another kind was replaced, as a oneof does).
struct FeatureValues {
  uint32_t kind = 0;  // 0: no kind set
  int64_t count = 0;
  int64_t first_list = 0;  // ordinal of the first list of the final run
};

FeatureValues count_values(const wire::Reader& entry, const std::string& name) {
  FeatureValues v;
  int64_t ordinal = 0;
  for_each_list(entry, [&](uint32_t kind, wire::Reader list) {
    if (kind != v.kind) {
      v = FeatureValues{kind, 0, ordinal};
    }
    ++ordinal;
    if (kind == kBytesList) {
      for_each_value_field(
          list, wire::kLengthDelimited,
          [&](wire::Reader& r) {
            r.read_length_delimited();
            ++v.count;
          },
          [](wire::Reader&) {});
    } else if (kind == kFloatList) {
      for_each_value_field(
          list, wire::kFixed32,
          [&](wire::Reader& r) {
            const size_t at = r.offset();
            const std::string_view packed = r.read_length_delimited();
            DIST_CHECK(packed.size() % 4 == 0, DataError, "malformed tf.train.Example: feature '",
                       name, "' has a packed float list of ", packed.size(), " bytes at byte ", at,
                       ", not a multiple of 4");
            v.count += static_cast<int64_t>(packed.size() / 4);
          },
          [&](wire::Reader& r) {
            r.read_fixed32();
            ++v.count;
          });
    } else {
      for_each_value_field(
          list, wire::kVarint,
          [&](wire::Reader& r) {
            // Each varint ends in the one byte without the high bit; fill_int64s checks the rest.
            for (char c : r.read_length_delimited()) v.count += (c & 0x80) == 0;
          },
          [&](wire::Reader& r) {
            r.read_varint();
            ++v.count;
          });
    }
  });
  return v;
}

// Calls fn(list) for the lists of the final run (see FeatureValues).
template <class Fn>
void for_each_final_list(const wire::Reader& entry, const FeatureValues& v, Fn&& fn) {
  int64_t ordinal = 0;
  const auto final_only = [&](uint32_t, wire::Reader list) {
    if (ordinal++ >= v.first_list) fn(list);
  };
  for_each_list(entry, final_only);
}

void fill_int64s(const wire::Reader& entry, const FeatureValues& v, int64_t* out) {
  int64_t n = 0;
  auto put = [&](uint64_t value) {
    DIST_INTERNAL_ASSERT(n < v.count, "more int64 values than counted");
    out[n++] = static_cast<int64_t>(value);  // int64 on the wire: two's complement in 64 bits
  };
  for_each_final_list(entry, v, [&](wire::Reader list) {
    for_each_value_field(
        list, wire::kVarint,
        [&](wire::Reader& r) {
          wire::Reader packed = r.read_message("tf.train.Example (a packed int64 list)");
          while (!packed.done()) put(packed.read_varint());
        },
        [&](wire::Reader& r) { put(r.read_varint()); });
  });
  DIST_INTERNAL_ASSERT(n == v.count, "int64 values: ", n, " of ", v.count);
}

void fill_floats(const wire::Reader& entry, const FeatureValues& v, float* out) {
  int64_t n = 0;
  for_each_final_list(entry, v, [&](wire::Reader list) {
    for_each_value_field(
        list, wire::kFixed32,
        [&](wire::Reader& r) {
          const std::string_view packed = r.read_length_delimited();
          // An empty packed list may come with no values at all, and then `out` is null.
          if (!packed.empty()) std::memcpy(out + n, packed.data(), packed.size());  // LE wire
          n += static_cast<int64_t>(packed.size() / 4);
        },
        [&](wire::Reader& r) {
          const uint32_t bits = r.read_fixed32();
          std::memcpy(out + n++, &bits, 4);
        });
  });
  DIST_INTERNAL_ASSERT(n == v.count, "float values: ", n, " of ", v.count);
}

std::string_view last_bytes(const wire::Reader& entry, const FeatureValues& v) {
  std::string_view value;
  for_each_final_list(entry, v, [&](wire::Reader list) {
    for_each_value_field(
        list, wire::kLengthDelimited, [&](wire::Reader& r) { value = r.read_length_delimited(); },
        [](wire::Reader&) {});
  });
  return value;
}

// The feature names a message about a missing one lists: the names come from the file, so
// each is escaped and cut (dist/core/printable.h), and only the first few are listed.
constexpr size_t kNamesListed = 10;
constexpr size_t kNameBytesShown = 40;

// "a, b, c": the feature names of an example, sorted, for the message about a missing one.
std::string names_in(std::string_view serialized) {
  std::vector<std::string_view> names;
  for_each_entry(serialized, [&](wire::Reader entry) { names.push_back(entry_key(entry)); });
  if (names.empty()) return "the example has no features";
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::string text = "the example has: ";
  for (size_t i = 0; i < names.size() && i < kNamesListed; ++i) {
    if (i > 0) text += ", ";
    text += printable(names[i], kNameBytesShown);
  }
  if (names.size() > kNamesListed)
    text += " and " + std::to_string(names.size() - kNamesListed) + " more";
  return text;
}

int64_t shape_elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // FeatureSpec checked the dims and their product
  return n;
}

at::Tensor parse_fixed(const wire::Reader& entry, const FixedLenFeature& f) {
  const FeatureValues v = count_values(entry, f.name);
  const uint32_t want = kind_for(f.type);
  DIST_CHECK(v.kind == want || v.kind == 0, DataError, "feature '", f.name, "' holds ",
             kind_name(v.kind), " values but the spec asks for ", kind_name(want));
  if (f.type == FeatureType::kBytes) {
    DIST_CHECK(v.count == 1, DataError, "feature '", f.name, "' has ", v.count,
               " byte strings but a FixedLenFeature of bytes takes exactly 1");
    return string_tensor(last_bytes(entry, v));
  }
  const int64_t expected = shape_elements(f.shape);
  DIST_CHECK(v.count == expected, DataError, "feature '", f.name, "' has ", v.count,
             " values but its FixedLenFeature shape ", detail::shape_string(f.shape), " needs ",
             expected);
  if (f.type == FeatureType::kInt64) {
    at::Tensor t = at::empty(f.shape, at::kLong);
    fill_int64s(entry, v, t.data_ptr<int64_t>());
    return t;
  }
  at::Tensor t = at::empty(f.shape, at::kFloat);
  fill_floats(entry, v, t.data_ptr<float>());
  return t;
}

at::Tensor parse_var(const wire::Reader& entry, const VarLenFeature& f) {
  const FeatureValues v = count_values(entry, f.name);
  const uint32_t want = kind_for(f.type);
  DIST_CHECK(v.kind == want || v.kind == 0, DataError, "feature '", f.name, "' holds ",
             kind_name(v.kind), " values but the spec asks for ", kind_name(want));
  if (f.type == FeatureType::kInt64) {
    at::Tensor t = at::empty({v.count}, at::kLong);
    fill_int64s(entry, v, t.data_ptr<int64_t>());
    return t;
  }
  at::Tensor t = at::empty({v.count}, at::kFloat);
  fill_floats(entry, v, t.data_ptr<float>());
  return t;
}

at::ScalarType dtype_for(FeatureType type) {
  return type == FeatureType::kInt64   ? at::kLong
         : type == FeatureType::kFloat ? at::kFloat
                                       : at::kByte;
}

void check_fixed(FixedLenFeature& f) {
  int64_t product = 1;
  for (int64_t d : f.shape) {
    DIST_CHECK_ARG(d >= 0, "FixedLenFeature '", f.name, "': shape ", detail::shape_string(f.shape),
                   " has a negative dimension");
    DIST_CHECK_ARG(!__builtin_mul_overflow(product, d, &product), "FixedLenFeature '", f.name,
                   "': shape ", detail::shape_string(f.shape),
                   " has more elements than int64 counts");
  }
  if (f.type == FeatureType::kBytes)
    DIST_CHECK_ARG(f.shape.empty() || f.shape == std::vector<int64_t>{1}, "FixedLenFeature '",
                   f.name, "' of bytes has shape ", detail::shape_string(f.shape),
                   "; it takes {} or {1}: one byte string, given as a 1-D uint8 tensor of its ",
                   "bytes (several strings have no one-tensor form)");
  if (!f.default_value) return;
  at::Tensor& d = *f.default_value;
  DIST_CHECK_ARG(d.defined(), "FixedLenFeature '", f.name, "': the default value is undefined");
  DIST_CHECK_ARG(d.scalar_type() == dtype_for(f.type), "FixedLenFeature '", f.name,
                 "': the default value is ", d.scalar_type(), " but a ", feature_type_name(f.type),
                 " feature gives ", dtype_for(f.type));
  if (f.type == FeatureType::kBytes)
    DIST_CHECK_ARG(d.dim() == 1, "FixedLenFeature '", f.name,
                   "': the default value of a bytes feature is a 1-D uint8 tensor of the bytes, ",
                   "got ", d.dim(), " dimensions");
  else
    DIST_CHECK_ARG(d.sizes() == at::IntArrayRef(f.shape), "FixedLenFeature '", f.name,
                   "': the default value has shape ", d.sizes(), " but the feature's is ",
                   detail::shape_string(f.shape));
  d = d.to(at::kCPU).contiguous();
}

// The Feature message for one list: its kind field holding the list.
std::string feature_message(uint32_t kind, const std::string& list) {
  std::string feature;
  wire::put_bytes(feature, static_cast<int>(kind), list);
  return feature;
}

}  // namespace

const char* feature_type_name(FeatureType type) {
  switch (type) {
    case FeatureType::kInt64:
      return "int64";
    case FeatureType::kFloat:
      return "float";
    case FeatureType::kBytes:
      return "bytes";
  }
  return "unknown";
}

// ---- ExampleBuilder ----

void ExampleBuilder::add(const std::string& name, Values values) {
  auto at =
      std::lower_bound(features_.begin(), features_.end(), name,
                       [](const auto& entry, const std::string& n) { return entry.first < n; });
  DIST_CHECK_ARG(at == features_.end() || at->first != name, "ExampleBuilder: feature '", name,
                 "' was already added; an Example maps each name to one feature");
  features_.emplace(at, name, std::move(values));
}

ExampleBuilder& ExampleBuilder::add_int64(const std::string& name, std::vector<int64_t> values) {
  Values v;
  v.kind = kInt64List;
  v.int64s = std::move(values);
  add(name, std::move(v));
  return *this;
}

ExampleBuilder& ExampleBuilder::add_float(const std::string& name, std::vector<float> values) {
  Values v;
  v.kind = kFloatList;
  v.floats = std::move(values);
  add(name, std::move(v));
  return *this;
}

ExampleBuilder& ExampleBuilder::add_bytes(const std::string& name,
                                          std::vector<std::string> values) {
  Values v;
  v.kind = kBytesList;
  v.bytes = std::move(values);
  add(name, std::move(v));
  return *this;
}

ExampleBuilder& ExampleBuilder::add_int64(const std::string& name, int64_t value) {
  return add_int64(name, std::vector<int64_t>{value});
}

ExampleBuilder& ExampleBuilder::add_float(const std::string& name, float value) {
  return add_float(name, std::vector<float>{value});
}

ExampleBuilder& ExampleBuilder::add_bytes(const std::string& name, std::string_view value) {
  return add_bytes(name, std::vector<std::string>{std::string(value)});
}

std::string ExampleBuilder::serialize() const {
  std::string features;
  std::string list, packed, entry;
  for (const auto& [name, v] : features_) {
    list.clear();
    packed.clear();
    // Numbers packed: one length-delimited field 1 of all values; none for an empty list, as
    // protobuf writes it.
    if (v.kind == kInt64List) {
      for (int64_t x : v.int64s) wire::put_varint(packed, static_cast<uint64_t>(x));
    } else if (v.kind == kFloatList) {
      for (float x : v.floats) wire::put_fixed(packed, x);
    } else {
      for (const std::string& b : v.bytes) wire::put_bytes(list, 1, b);
    }
    if (!packed.empty()) wire::put_bytes(list, 1, packed);
    entry.clear();
    wire::put_bytes(entry, 1, name);
    wire::put_bytes(entry, 2, feature_message(v.kind, list));
    wire::put_bytes(features, 1, entry);
  }
  std::string example;
  wire::put_bytes(example, 1, features);
  return example;
}

// ---- FeatureSpec and parsing ----

FeatureSpec::FeatureSpec(std::vector<Entry> entries) {
  auto data = std::make_shared<Data>();
  data->entries = std::move(entries);
  for (size_t i = 0; i < data->entries.size(); ++i) {
    Entry& e = data->entries[i];
    const std::string& name =
        std::visit([](const auto& f) -> const std::string& { return f.name; }, e);
    DIST_CHECK_ARG(!name.empty(), "FeatureSpec: entry ", i, " has an empty name");
    if (auto* fixed = std::get_if<FixedLenFeature>(&e)) {
      check_fixed(*fixed);
    } else {
      const auto& var = std::get<VarLenFeature>(e);
      DIST_CHECK_ARG(var.type != FeatureType::kBytes, "VarLenFeature '", name,
                     "' of bytes: a list of several byte strings is not supported as one tensor; ",
                     "for one string (an encoded image, a text) use FixedLenFeature{\"", name,
                     "\", FeatureType::kBytes, {}}");
    }
    const bool inserted =
        data->index.emplace(std::string_view(name), static_cast<int64_t>(i)).second;
    DIST_CHECK_ARG(inserted, "FeatureSpec: feature '", name,
                   "' is listed twice; each feature gives one tensor");
  }
  std::vector<std::string> names;
  for (const Entry& e : data->entries)
    names.push_back(std::visit([](const auto& f) { return f.name; }, e));
  data->names = Element::make_names(std::move(names));
  data_ = std::move(data);
}

int64_t FeatureSpec::find(std::string_view name) const {
  auto it = data_->index.find(name);
  return it == data_->index.end() ? -1 : it->second;
}

Element parse_example(std::string_view serialized, const FeatureSpec& spec) {
  // The last map entry of each wanted feature (a later entry for a name replaces an earlier).
  std::vector<wire::Reader> found(spec.size(), wire::Reader(std::string_view()));
  std::vector<char> has(spec.size(), 0);
  for_each_entry(serialized, [&](wire::Reader entry) {
    const int64_t i = spec.find(entry_key(entry));
    if (i < 0) return;
    found[i] = entry;
    has[i] = 1;
  });

  Element out;
  out.reserve(spec.size());
  for (size_t i = 0; i < spec.size(); ++i) {
    const FeatureSpec::Entry& e = spec.entries()[i];
    if (const auto* fixed = std::get_if<FixedLenFeature>(&e)) {
      if (has[i]) {
        out.push_back(parse_fixed(found[i], *fixed));
      } else {
        DIST_CHECK(fixed->default_value.has_value(), DataError, "feature '", fixed->name,
                   "' is missing (", names_in(serialized),
                   ") and its FixedLenFeature has no default value");
        out.push_back(fixed->default_value->clone());
      }
    } else {
      const auto& var = std::get<VarLenFeature>(e);
      out.push_back(has[i] ? parse_var(found[i], var) : at::empty({0}, dtype_for(var.type)));
    }
  }
  out.set_names(spec.names());
  return out;
}

}  // namespace dist::data
