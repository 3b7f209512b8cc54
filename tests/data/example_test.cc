// tf.train.Example: parse_example against messages encoded here by hand from the proto
// specification and by protoc (libprotobuf's encoder), ExampleBuilder's output against the
// specified bytes and against protoc's decoder, and the errors of each kind.
#include "dist/data/example.h"
#include "dist/data/files.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/protobuf_wire.h"
#include "dist/core/error.h"
#include "expect_error.h"
#include "test_util.h"

namespace dist::data {
namespace {

using testing::contains;
using testing::message_of;

// ---- An encoder written here from the wire format, independent of src/core/protobuf_wire ----

std::string varint(uint64_t v) {
  std::string out;
  for (; v >= 0x80; v >>= 7) out.push_back(static_cast<char>(0x80 | (v & 0x7F)));
  out.push_back(static_cast<char>(v));
  return out;
}
std::string key(int field, int type) { return varint(static_cast<uint64_t>(field) * 8 + type); }
std::string ld(int field, const std::string& bytes) {
  return key(field, 2) + varint(bytes.size()) + bytes;
}
std::string fixed32(float f) {
  std::string out(4, '\0');
  std::memcpy(out.data(), &f, 4);
  return out;
}
std::string entry(const std::string& name, const std::string& feature) {
  return ld(1, name) + ld(2, feature);
}
std::string example(const std::string& entries) { return ld(1, entries); }

std::vector<int64_t> int64s(const at::Tensor& t) {
  EXPECT_EQ(t.scalar_type(), at::kLong);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}
std::vector<float> floats(const at::Tensor& t) {
  EXPECT_EQ(t.scalar_type(), at::kFloat);
  return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
}

using testing::data_error_or_none;

// protoc with the schema of example.proto and feature.proto (as their specification gives
// them), reading `input` from a file; its standard output.
std::string protoc(const std::string& mode, const std::string& input) {
  testing::TempDir dir;
  testing::write_file(dir.file("example.proto"), R"(syntax = "proto3";
package tensorflow;
message BytesList { repeated bytes value = 1; }
message FloatList { repeated float value = 1 [packed = true]; }
message Int64List { repeated int64 value = 1 [packed = true]; }
message Feature {
  oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; }
}
message Features { map<string, Feature> feature = 1; }
message Example { Features features = 1; }
)");
  testing::write_file(dir.file("in"), input);
  const std::string command = "protoc " + mode + "=tensorflow.Example --proto_path=" + dir.path() +
                              " " + dir.file("example.proto") + " < " + dir.file("in") + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  std::string out;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) out.append(buffer.data(), n);
  if (pclose(pipe) != 0) ADD_FAILURE() << "protoc failed: " << out;
  return out;
}

TEST(ExampleTest, ParsesAnExampleEncodedByHand) {
  const std::string minus_one = varint(static_cast<uint64_t>(-1));  // 10 bytes
  ASSERT_EQ(minus_one.size(), 10u);
  // "label": unpacked int64s, its value before its key; "weights": packed floats and an unknown
  // field in the list; "image": bytes with a zero; unknown fields in Example and Features.
  const std::string label_list =
      key(1, 0) + varint(3) + key(1, 0) + minus_one + key(1, 0) + varint(300);
  const std::string weights_list =
      ld(1, fixed32(1.5f) + fixed32(-2.0f)) + key(9, 1) + std::string(8, '\x7f');
  const std::string entries = ld(2, ld(3, label_list)) + ld(1, "label");
  const std::string features = ld(1, entries) + key(5, 5) + "abcd" +
                               ld(1, entry("weights", ld(2, weights_list))) +
                               ld(1, entry("image", ld(1, ld(1, std::string("\x89PNG\0", 5)))));
  const std::string serialized = key(7, 0) + varint(42) + ld(1, features);

  const FeatureSpec spec({FixedLenFeature{"label", FeatureType::kInt64, {3}},
                          VarLenFeature{"weights", FeatureType::kFloat},
                          FixedLenFeature{"image", FeatureType::kBytes, {}}});
  const Element e = parse_example(serialized, spec);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].sizes(), at::IntArrayRef({3}));
  EXPECT_EQ(int64s(e[0]), (std::vector<int64_t>{3, -1, 300}));
  EXPECT_EQ(floats(e[1]), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(e[2].scalar_type(), at::kByte);
  EXPECT_EQ(string_of(e[2]), std::string("\x89PNG\0", 5));
}

TEST(ExampleTest, FollowsProtobufMergeRules) {
  const std::string int_list = ld(3, ld(1, varint(1)));
  const std::string serialized =
      // "x" twice in the map: the last entry wins.
      example(ld(1, entry("x", int_list)) + ld(1, entry("x", ld(3, ld(1, varint(5) + varint(6))))) +
              // A Feature with its int64_list twice: the lists merge.
              ld(1, entry("merged",
                          ld(3, key(1, 0) + varint(1)) + ld(3, ld(1, varint(2) + varint(3))))) +
              // int64 then float in the oneof: the float list replaces the ints.
              ld(1, entry("switched", int_list + ld(2, ld(1, fixed32(2.5f))))) +
              // The entry's value field twice: the Features merge too.
              ld(1, entry("two_values", "") + ld(2, int_list) + ld(2, int_list))) +
      // A second `features` field adds its entries.
      example(ld(1, entry("later", int_list)));
  const FeatureSpec spec({VarLenFeature{"x", FeatureType::kInt64},
                          VarLenFeature{"merged", FeatureType::kInt64},
                          VarLenFeature{"switched", FeatureType::kFloat},
                          VarLenFeature{"two_values", FeatureType::kInt64},
                          FixedLenFeature{"later", FeatureType::kInt64, {}}});
  const Element e = parse_example(serialized, spec);
  EXPECT_EQ(int64s(e[0]), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(int64s(e[1]), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(floats(e[2]), (std::vector<float>{2.5f}));
  EXPECT_EQ(int64s(e[3]), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(e[4].dim(), 0);
  EXPECT_EQ(e[4].item<int64_t>(), 1);
}

TEST(ExampleTest, BuilderWritesTheSpecifiedPackedBytes) {
  // Example{features{feature{key: "n", value{int64_list{value: [1, 2]}}}}}, packed.
  const std::string expected = {0x0a, 0x0d, 0x0a, 0x0b, 0x0a, 0x01, 'n', 0x12,
                                0x06, 0x1a, 0x04, 0x0a, 0x02, 0x01, 0x02};
  EXPECT_EQ(ExampleBuilder().add_int64("n", {1, 2}).serialize(), expected);
  // Features sorted by name, whatever the order they were added in.
  EXPECT_EQ(ExampleBuilder().add_int64("b", 1).add_int64("a", 2).serialize(),
            ExampleBuilder().add_int64("a", 2).add_int64("b", 1).serialize());
}

TEST(ExampleTest, ProtocDecodesTheBuilderOutput) {
  const std::string serialized = ExampleBuilder()
                                     .add_int64("b", {1, -1, 1000000000000})
                                     .add_float("a", {1.5f, -2.0f})
                                     .add_bytes("c", std::vector<std::string>{"xy", "z"})
                                     .add_int64("empty", std::vector<int64_t>{})
                                     .serialize();
  EXPECT_EQ(protoc("--decode", serialized), R"(features {
  feature {
    key: "a"
    value {
      float_list {
        value: 1.5
        value: -2
      }
    }
  }
  feature {
    key: "b"
    value {
      int64_list {
        value: 1
        value: -1
        value: 1000000000000
      }
    }
  }
  feature {
    key: "c"
    value {
      bytes_list {
        value: "xy"
        value: "z"
      }
    }
  }
  feature {
    key: "empty"
    value {
      int64_list {
      }
    }
  }
}
)");
}

TEST(ExampleTest, ParsesWhatProtocEncodes) {
  const std::string serialized = protoc("--encode", R"(features {
  feature { key: "image/encoded" value { bytes_list { value: "\377\330\377" } } }
  feature { key: "image/class/label" value { int64_list { value: [7] } } }
  feature { key: "bbox" value { float_list { value: [0.25, 0.5, 0.75, 1] } } }
})");
  const FeatureSpec spec({FixedLenFeature{"image/encoded", FeatureType::kBytes, {1}},
                          FixedLenFeature{"image/class/label", FeatureType::kInt64, {}},
                          FixedLenFeature{"bbox", FeatureType::kFloat, {2, 2}}});
  const Element e = parse_example(serialized, spec);
  EXPECT_EQ(string_of(e[0]), "\xff\xd8\xff");
  EXPECT_EQ(e[1].item<int64_t>(), 7);
  EXPECT_EQ(e[2].sizes(), at::IntArrayRef({2, 2}));
  EXPECT_EQ(floats(e[2]), (std::vector<float>{0.25f, 0.5f, 0.75f, 1.0f}));
}

TEST(ExampleTest, RoundTripsThroughTheBuilder) {
  std::vector<float> pixels(2 * 3 * 4);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i) / 7;
  const std::string serialized = ExampleBuilder()
                                     .add_float("pixels", pixels)
                                     .add_int64("label", -3)
                                     .add_int64("ids", {INT64_MIN, 0, INT64_MAX})
                                     .add_bytes("raw", std::string(1000, '\0'))
                                     .add_float("none", std::vector<float>{})
                                     .serialize();
  const FeatureSpec spec({FixedLenFeature{"pixels", FeatureType::kFloat, {2, 3, 4}},
                          FixedLenFeature{"label", FeatureType::kInt64, {1}},
                          VarLenFeature{"ids", FeatureType::kInt64},
                          FixedLenFeature{"raw", FeatureType::kBytes, {1}},
                          VarLenFeature{"none", FeatureType::kFloat},
                          FixedLenFeature{"zero", FeatureType::kFloat, {0}, at::zeros({0})}});
  const Element e = parse_example(serialized, spec);
  EXPECT_EQ(floats(e[0]), pixels);
  EXPECT_EQ(e[0].sizes(), at::IntArrayRef({2, 3, 4}));
  EXPECT_EQ(int64s(e[1]), std::vector<int64_t>{-3});
  EXPECT_EQ(int64s(e[2]), (std::vector<int64_t>{INT64_MIN, 0, INT64_MAX}));
  EXPECT_EQ(string_of(e[3]), std::string(1000, '\0'));
  EXPECT_EQ(e[4].numel(), 0);
  EXPECT_EQ(e[4].scalar_type(), at::kFloat);
  EXPECT_EQ(e[5].sizes(), at::IntArrayRef({0}));  // missing, from its default
}

TEST(ExampleTest, MissingMistypedAndMiscountedFeaturesAreNamed) {
  const std::string serialized =
      ExampleBuilder().add_int64("c", 1).add_float("a", {1, 2, 3}).add_bytes("b", "x").serialize();
  EXPECT_EQ(data_error_or_none([&] {
              parse_example(
                  serialized,
                  FeatureSpec({FixedLenFeature{"image/class/label", FeatureType::kInt64, {}}}));
            }),
            "feature 'image/class/label' is missing (the example has: a, b, c) and its "
            "FixedLenFeature has no default value");
  EXPECT_EQ(data_error_or_none([&] {
              parse_example(serialized, FeatureSpec({VarLenFeature{"a", FeatureType::kInt64}}));
            }),
            "feature 'a' holds float (float_list) values but the spec asks for int64 (int64_list)");
  EXPECT_EQ(
      data_error_or_none([&] {
        parse_example(serialized, FeatureSpec({FixedLenFeature{"a", FeatureType::kFloat, {2, 2}}}));
      }),
      "feature 'a' has 3 values but its FixedLenFeature shape [2, 2] needs 4");
  EXPECT_TRUE(contains(
      data_error_or_none([&] {
        parse_example(
            ExampleBuilder().add_bytes("b", std::vector<std::string>{"x", "y"}).serialize(),
            FeatureSpec({FixedLenFeature{"b", FeatureType::kBytes, {}}}));
      }),
      "feature 'b' has 2 byte strings but a FixedLenFeature of bytes takes "
      "exactly 1"));
  EXPECT_TRUE(
      contains(data_error_or_none([&] {
                 parse_example("", FeatureSpec({FixedLenFeature{"x", FeatureType::kInt64, {}}}));
               }),
               "(the example has no features)"));
}

// Feature names come from the file: the message about a missing one escapes them and lists a
// bounded number, however many and however long they are (a nested record gave 395 KB of binary
// on stderr: issue 68, item 6).
TEST(ExampleTest, TheMissingFeatureMessageEscapesAndBoundsTheNamesItLists) {
  ExampleBuilder builder;
  for (int i = 0; i < 500; ++i)
    builder.add_int64(std::string(1000, static_cast<char>('\x01' + i % 20)) + std::to_string(i), 1);
  const std::string message = data_error_or_none([&] {
    parse_example(builder.serialize(),
                  FeatureSpec({FixedLenFeature{"image/encoded", FeatureType::kBytes, {}}}));
  });
  EXPECT_LT(message.size(), 4096u) << message.size();
  for (char c : message) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << static_cast<int>(c);
  EXPECT_TRUE(contains(message, "\\x01")) << message.substr(0, 200);
  EXPECT_TRUE(contains(message, "and 490 more")) << message;
  EXPECT_TRUE(contains(message, "feature 'image/encoded' is missing")) << message;
}

TEST(ExampleTest, DefaultsStandInForMissingFeatures) {
  const FeatureSpec spec(
      {FixedLenFeature{"d", FeatureType::kFloat, {2}, at::tensor({7.0f, 8.0f})},
       FixedLenFeature{"s", FeatureType::kBytes, {}, string_tensor("none")},
       VarLenFeature{"v", FeatureType::kInt64},
       FixedLenFeature{"present", FeatureType::kInt64, {}, at::scalar_tensor(-1, at::kLong)}});
  const Element e = parse_example(ExampleBuilder().add_int64("present", 5).serialize(), spec);
  EXPECT_EQ(floats(e[0]), (std::vector<float>{7, 8}));
  EXPECT_EQ(string_of(e[1]), "none");
  EXPECT_EQ(e[2].numel(), 0);
  EXPECT_EQ(e[2].scalar_type(), at::kLong);
  EXPECT_EQ(e[3].item<int64_t>(), 5);
  // The default is copied: changing one result leaves the next one alone.
  e[0].fill_(0);
  EXPECT_EQ(floats(parse_example("", spec)[0]), (std::vector<float>{7, 8}));
}

TEST(ExampleTest, BadSpecsAreRefused) {
  auto refused = [](std::vector<FeatureSpec::Entry> entries) {
    return message_of<InvalidArgument>([&] { FeatureSpec spec(std::move(entries)); });
  };
  EXPECT_TRUE(contains(refused({VarLenFeature{"t", FeatureType::kBytes}}),
                       "VarLenFeature 't' of bytes: a list of several byte strings is not "
                       "supported as one tensor"));
  EXPECT_TRUE(contains(refused({FixedLenFeature{"t", FeatureType::kBytes, {2}}}),
                       "has shape [2]; it takes {} or {1}"));
  EXPECT_TRUE(contains(
      refused({VarLenFeature{"a", FeatureType::kInt64}, VarLenFeature{"a", FeatureType::kFloat}}),
      "'a' is listed twice"));
  EXPECT_TRUE(contains(refused({VarLenFeature{"", FeatureType::kInt64}}), "empty name"));
  EXPECT_TRUE(contains(refused({FixedLenFeature{"n", FeatureType::kInt64, {2, -1}}}),
                       "negative dimension"));
  EXPECT_TRUE(contains(
      refused({FixedLenFeature{"d", FeatureType::kInt64, {2}, at::zeros({2}, at::kFloat)}}),
      "the default value is Float but a int64 feature gives Long"));
  EXPECT_TRUE(
      contains(refused({FixedLenFeature{"d", FeatureType::kInt64, {2}, at::zeros({3}, at::kLong)}}),
               "the default value has shape [3] but the feature's is [2]"));
  EXPECT_TRUE(contains(
      message_of<InvalidArgument>([] { ExampleBuilder().add_int64("a", 1).add_float("a", 1); }),
      "feature 'a' was already added"));
}

TEST(ExampleTest, MalformedMessagesAreDataErrors) {
  const FeatureSpec spec({VarLenFeature{"x", FeatureType::kInt64}});
  const std::string good = ExampleBuilder().add_int64("x", {1, 2, 300}).serialize();
  for (size_t cut = 1; cut < good.size(); ++cut) {
    const std::string message =
        data_error_or_none([&] { parse_example(good.substr(0, cut), spec); });
    EXPECT_TRUE(contains(message, "malformed tf.train.Example")) << cut << ": " << message;
  }
  // The outer length says 15 bytes where 1 follows.
  EXPECT_EQ(data_error_or_none([&] { parse_example(good.substr(0, 3), spec); }),
            "malformed tf.train.Example: the length-delimited value at byte 2 needs 15 bytes but "
            "only 1 remain before the message ends at byte 3 (truncated or corrupt)");
  EXPECT_TRUE(contains(data_error_or_none([&] { parse_example(key(1, 3) + key(1, 4), spec); }),
                       "groups are deprecated and not supported"));
  EXPECT_TRUE(contains(data_error_or_none([&] { parse_example(key(1, 7), spec); }), "wire type 7"));
  EXPECT_TRUE(contains(data_error_or_none([&] { parse_example(std::string(1, '\0'), spec); }),
                       "field number 0"));
  EXPECT_TRUE(contains(
      data_error_or_none([&] { parse_example(key(2, 0) + std::string(11, '\xff'), spec); }),
      "does not fit 64 bits"));
  // A packed float list whose length is not a multiple of 4.
  EXPECT_TRUE(contains(data_error_or_none([&] {
                         parse_example(example(ld(1, entry("x", ld(2, ld(1, "abcde"))))),
                                       FeatureSpec({VarLenFeature{"x", FeatureType::kFloat}}));
                       }),
                       "packed float list of 5 bytes"));
}

TEST(ExampleTest, WireReaderReportsOffsetsFromTheOutermostMessage) {
  // A message {1: {2: <a length of 9 with 2 bytes left>}}: the inner overrun is at byte 2.
  const std::string bytes = ld(1, key(2, 2) + varint(9) + "ab");
  wire::Reader outer(bytes, "Outer");
  ASSERT_EQ(outer.read_key().field, 1u);
  wire::Reader inner = outer.read_message("Inner");
  EXPECT_EQ(inner.offset(), 2u);
  EXPECT_EQ(inner.read_key().type, wire::kLengthDelimited);
  EXPECT_EQ(message_of<DataError>([&] { inner.read_length_delimited(); }),
            "malformed Inner: the length-delimited value at byte 4 needs 9 bytes but only 2 "
            "remain before the message ends at byte 6 (truncated or corrupt)");
  wire::Reader fixed(std::string_view("\x01\x02\x03", 3), "F");
  EXPECT_TRUE(contains(message_of<DataError>([&] { fixed.read_fixed32(); }), "fixed32 at byte 0"));
  EXPECT_TRUE(contains(message_of<DataError>([&] { fixed.read_fixed64(); }), "fixed64 at byte 0"));
  // Every skippable wire type.
  const std::string all = key(1, 0) + varint(1ull << 60) + key(2, 1) + std::string(8, 'x') +
                          ld(3, "abc") + key(4, 5) + "wxyz";
  wire::Reader r(all);
  for (int i = 0; i < 4; ++i) r.skip(r.read_key().type);
  EXPECT_TRUE(r.done());
}

TEST(ExampleTest, BytesTensorsRoundTrip) {
  const std::string bytes("a\0b\xff", 4);
  const at::Tensor t = string_tensor(bytes);
  EXPECT_EQ(t.scalar_type(), at::kByte);
  EXPECT_EQ(t.sizes(), at::IntArrayRef({4}));
  EXPECT_EQ(string_of(t), bytes);
  EXPECT_EQ(string_of(string_tensor("")), "");
  EXPECT_EQ(string_of(t.view({2, 2}).t()), std::string("ab\0\xff", 4));  // row-major order
  EXPECT_TRUE(contains(message_of<InvalidArgument>([] { string_of(at::zeros({2})); }),
                       "needs a uint8 tensor"));
}

}  // namespace
}  // namespace dist::data
