#include "core/protobuf_wire.h"

#include "dist/core/error.h"

namespace dist::wire {

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, int field, WireType type) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | type);
}

void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

void put_double(std::string& out, int field, double value) {
  put_key(out, field, kFixed64);
  put_fixed(out, value);
}

void put_packed_doubles(std::string& out, int field, const std::vector<double>& values) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, values.size() * sizeof(double));
  for (double v : values) put_fixed(out, v);
}

void Reader::overrun(const char* reading, size_t at, uint64_t need) const {
  throw DataError(detail::concat("malformed ", what_, ": the ", reading, " at byte ", base_ + at,
                                 " needs ", need, " bytes but only ", data_.size() - at,
                                 " remain before the message ends at byte ", base_ + data_.size(),
                                 " (truncated or corrupt)"));
}

uint64_t Reader::read_varint() {
  const size_t start = pos_;
  uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos_ == data_.size()) overrun("varint", start, pos_ - start + 1);
    const auto byte = static_cast<uint8_t>(data_[pos_++]);
    // The tenth byte holds bit 63 only; more would not fit 64 bits.
    DIST_CHECK(shift < 63 || byte <= 1, DataError, "malformed ", what_, ": the varint at byte ",
               base_ + start, " does not fit 64 bits (its tenth byte is ", int{byte}, ")");
    value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return value;
  }
  throw DataError(detail::concat("malformed ", what_, ": the varint at byte ", base_ + start,
                                 " is longer than 10 bytes"));
}

Key Reader::read_key() {
  const size_t start = pos_;
  const uint64_t key = read_varint();
  const uint64_t field = key >> 3;
  const auto type = static_cast<uint8_t>(key & 7);
  DIST_CHECK(field >= 1 && field < (uint64_t{1} << 29), DataError, "malformed ", what_,
             ": the field key at byte ", base_ + start, " has field number ", field,
             " (valid numbers are 1 to 2^29 - 1)");
  DIST_CHECK(type <= kFixed32, DataError, "malformed ", what_, ": the key of field ", field,
             " at byte ", base_ + start, " has wire type ", int{type},
             ", which does not exist (0 to 5 do)");
  return Key{static_cast<uint32_t>(field), static_cast<WireType>(type)};
}

uint32_t Reader::read_fixed32() {
  if (data_.size() - pos_ < 4) overrun("fixed32", pos_, 4);
  uint32_t value;
  std::memcpy(&value, data_.data() + pos_, 4);  // little-endian host
  pos_ += 4;
  return value;
}

uint64_t Reader::read_fixed64() {
  if (data_.size() - pos_ < 8) overrun("fixed64", pos_, 8);
  uint64_t value;
  std::memcpy(&value, data_.data() + pos_, 8);
  pos_ += 8;
  return value;
}

std::string_view Reader::read_length_delimited() {
  const uint64_t length = read_varint();
  if (length > data_.size() - pos_) overrun("length-delimited value", pos_, length);
  std::string_view value = data_.substr(pos_, static_cast<size_t>(length));
  pos_ += static_cast<size_t>(length);
  return value;
}

Reader Reader::read_message(const char* what) {
  std::string_view bytes = read_length_delimited();
  return Reader(bytes, what, base_ + static_cast<size_t>(bytes.data() - data_.data()));
}

void Reader::skip(WireType type) {
  switch (type) {
    case kVarint:
      read_varint();
      return;
    case kFixed64:
      read_fixed64();
      return;
    case kLengthDelimited:
      read_length_delimited();
      return;
    case kFixed32:
      read_fixed32();
      return;
    default:
      throw DataError(detail::concat("malformed ", what_, ": a group (wire type ", int{type},
                                     ") ends at byte ", offset(),
                                     "; groups are deprecated and not supported"));
  }
}

}  // namespace dist::wire
