// The protocol-buffer wire format, written and read by hand: TensorBoard events (the summary
// writer) and tf.train.Example records (include/dist/data/example.h) are small, fixed schemas,
// not worth a dependency on libprotobuf and generated code in the library.
//
// A message is a sequence of fields, each a key followed by a value. The key is the varint
// (field_number << 3 | wire_type); the value's encoding depends on the wire type:
//   0 varint: 7 bits per byte, least significant group first, high bit set on all but the
//     last byte (at most 10 bytes for 64 bits);
//   1 fixed64: 8 bytes, little-endian (double, fixed64);
//   2 length-delimited: a varint byte count, then the bytes (strings, bytes, sub-messages,
//     packed repeated scalars);
//   3, 4 start/end group: deprecated; this reader refuses them;
//   5 fixed32: 4 bytes, little-endian (float, fixed32).
// A parser must accept fields in any order and skip the ones it does not know.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace dist::wire {

enum WireType : uint8_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

// ---- Writing: each appends to `out`. ----

void put_varint(std::string& out, uint64_t v);
void put_key(std::string& out, int field, WireType type);

// The bytes of a 4- or 8-byte scalar, little-endian as the wire wants: the library builds for
// little-endian hosts only (x86-64, aarch64), so this is a plain copy.
template <class T>
void put_fixed(std::string& out, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "fixed32 or fixed64 only");
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

// A length-delimited field: key, byte count, bytes (a string, bytes, or a sub-message).
void put_bytes(std::string& out, int field, std::string_view bytes);
// A double field (fixed64).
void put_double(std::string& out, int field, double value);
// A packed repeated double field (one length-delimited field of fixed64 values).
void put_packed_doubles(std::string& out, int field, const std::vector<double>& values);

// ---- Reading ----

struct Key {
  uint32_t field = 0;
  WireType type = kVarint;
};

// A bounds-checked cursor over one serialized message. It never reads outside the bytes it
// was given: every overrun or malformed key throws dist::DataError saying what was being read,
// at which byte offset (counted from the start of the outermost message, so nested readers
// report offsets a hex dump of the record shows), and naming `what` (the message type, e.g.
// "tf.train.Example"). The bytes are not copied: they must outlive the reader and the views it
// returns. Cheap to copy; not thread-safe.
class Reader {
 public:
  // `what` must outlive the reader (a string literal). `base` is the offset of `bytes` in the
  // outermost message.
  explicit Reader(std::string_view bytes, const char* what = "protocol buffer", size_t base = 0)
      : data_(bytes), what_(what), base_(base) {}

  // Whether every byte has been consumed.
  bool done() const { return pos_ == data_.size(); }
  // Offset of the next byte, from the start of the outermost message.
  size_t offset() const { return base_ + pos_; }

  // A field's key. Throws for field number 0 (or above 2^29 - 1) and wire types 6 and 7.
  Key read_key();
  uint64_t read_varint();
  uint32_t read_fixed32();
  uint64_t read_fixed64();
  // The bytes of a length-delimited value (a view into the message).
  std::string_view read_length_delimited();
  // A length-delimited value read as a sub-message: a Reader over it whose offsets continue
  // this one's.
  Reader read_message(const char* what);
  // Skips the value of a field of wire type `type` (after its key). Groups (3, 4) throw: no
  // schema this library reads has them, and proto3 has none.
  void skip(WireType type);

 private:
  [[noreturn]] void overrun(const char* reading, size_t at, uint64_t need) const;

  std::string_view data_;
  const char* what_;
  size_t base_;
  size_t pos_ = 0;
};

}  // namespace dist::wire
