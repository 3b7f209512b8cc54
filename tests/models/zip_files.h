// Zip archives taken apart and written again, for tests that damage a TorchScript file the way
// a bad copy or a hostile sender would (tests/models/torchscript_archive_test.cc,
// tests/tools/dist_train_torchscript_test.cc). The layout is PKWARE's APPNOTE: local headers
// with their data, the central directory, its end record (and zip64's when asked).
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace dist::testing {

struct ZipRecord {
  std::string name;
  std::string data;            // uncompressed
  bool deflate = false;        // else stored
  int64_t declared_size = -1;  // the uncompressed size to write, when not data.size()
  // Deflated bytes written as they are, with `crc`, instead of `data` (a stream too large to
  // hold uncompressed: deflated_zeros).
  std::string deflated;
  uint32_t crc = 0;
};

// `prefix` followed by `zeros` zero bytes, deflated a chunk at a time (never held whole), with
// the CRC-32 of the whole: what a zip bomb holds.
inline ZipRecord deflated_zeros(const std::string& name, const std::string& prefix,
                                uint64_t zeros) {
  ZipRecord record;
  record.name = name;
  record.deflate = true;
  record.declared_size = static_cast<int64_t>(prefix.size() + zeros);
  z_stream stream{};
  deflateInit2(&stream, Z_BEST_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 9, Z_DEFAULT_STRATEGY);
  std::string chunk(size_t{1} << 20, '\0');
  std::string out(size_t{1} << 20, '\0');
  uLong crc =
      crc32(0, reinterpret_cast<const Bytef*>(prefix.data()), static_cast<uInt>(prefix.size()));
  auto feed = [&](const std::string& in, size_t count, int flush) {
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    stream.avail_in = static_cast<uInt>(count);
    do {
      stream.next_out = reinterpret_cast<Bytef*>(out.data());
      stream.avail_out = static_cast<uInt>(out.size());
      deflate(&stream, flush);
      record.deflated.append(out.data(), out.size() - stream.avail_out);
    } while (stream.avail_out == 0);
  };
  feed(prefix, prefix.size(), Z_NO_FLUSH);
  for (uint64_t left = zeros; left > 0;) {
    const size_t count = static_cast<size_t>(std::min<uint64_t>(left, chunk.size()));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(chunk.data()), static_cast<uInt>(count));
    left -= count;
    feed(chunk, count, left == 0 ? Z_FINISH : Z_NO_FLUSH);
  }
  deflateEnd(&stream);
  record.crc = static_cast<uint32_t>(crc);
  return record;
}

inline uint64_t zip_field(const std::string& bytes, size_t at, int count) {
  uint64_t value = 0;
  for (int i = count - 1; i >= 0; --i)
    value = (value << 8) | static_cast<unsigned char>(bytes.at(at + static_cast<size_t>(i)));
  return value;
}

inline void put_field(std::string& out, uint64_t value, int count) {
  for (int i = 0; i < count; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

inline std::string inflate_raw(const std::string& in, size_t size) {
  std::string out(size, '\0');
  z_stream stream{};
  inflateInit2(&stream, -MAX_WBITS);
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  stream.avail_in = static_cast<uInt>(in.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int status = inflate(&stream, Z_FINISH);
  inflateEnd(&stream);
  if (status != Z_STREAM_END) throw std::runtime_error("inflate_raw: not deflate data");
  return out;
}

inline std::string deflate_raw(const std::string& in) {
  z_stream stream{};
  deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&stream, in.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  stream.avail_in = static_cast<uInt>(in.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

// The records of a zip archive without zip64 (torch.jit.save's for small modules), in the
// central directory's order.
inline std::vector<ZipRecord> read_zip(const std::string& bytes) {
  const size_t end = bytes.rfind(std::string("PK\x05\x06", 4));
  if (end == std::string::npos) throw std::runtime_error("read_zip: no end of central directory");
  const uint64_t entries = zip_field(bytes, end + 10, 2);
  size_t at = zip_field(bytes, end + 16, 4);
  std::vector<ZipRecord> records;
  for (uint64_t i = 0; i < entries; ++i) {
    const size_t name_length = zip_field(bytes, at + 28, 2);
    ZipRecord record;
    record.name = bytes.substr(at + 46, name_length);
    record.deflate = zip_field(bytes, at + 10, 2) == 8;
    const uint64_t stored = zip_field(bytes, at + 20, 4), size = zip_field(bytes, at + 24, 4);
    const size_t local = zip_field(bytes, at + 42, 4);
    const size_t data =
        local + 30 + zip_field(bytes, local + 26, 2) + zip_field(bytes, local + 28, 2);
    record.data = bytes.substr(data, stored);
    if (record.deflate) record.data = inflate_raw(record.data, size);
    records.push_back(record);
    at += 46 + name_length + zip_field(bytes, at + 30, 2) + zip_field(bytes, at + 32, 2);
  }
  return records;
}

// zip64's end of central directory record and its locator, appended to `out`.
inline void put_zip64_end(std::string& out, uint64_t entries, uint64_t directory_size,
                          uint64_t directory_offset) {
  const uint64_t end64 = out.size();
  put_field(out, 0x06064b50, 4);
  put_field(out, 44, 8);  // the record's size after this field
  put_field(out, 45, 2);
  put_field(out, 45, 2);
  put_field(out, 0, 4);
  put_field(out, 0, 4);
  put_field(out, entries, 8);
  put_field(out, entries, 8);
  put_field(out, directory_size, 8);
  put_field(out, directory_offset, 8);
  put_field(out, 0x07064b50, 4);
  put_field(out, 0, 4);
  put_field(out, end64, 8);
  put_field(out, 1, 4);
}

// A zip archive of `records`, each with its true CRC-32. With `zip64`, every size and offset
// is written in zip64's fields (as a writer does past 4 GiB) and the end has zip64's records.
inline std::string write_zip(const std::vector<ZipRecord>& records, bool zip64 = false) {
  std::string out, directory;
  for (const ZipRecord& record : records) {
    const std::string data = !record.deflated.empty() ? record.deflated
                             : record.deflate         ? deflate_raw(record.data)
                                                      : record.data;
    const uint64_t size = record.declared_size >= 0 ? static_cast<uint64_t>(record.declared_size)
                                                    : record.data.size();
    const uint32_t crc =
        !record.deflated.empty()
            ? record.crc
            : static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(record.data.data()),
                                          static_cast<uInt>(record.data.size())));
    const uint64_t offset = out.size();
    const uint16_t method = record.deflate ? 8 : 0;
    std::string extra;
    if (zip64) {
      put_field(extra, 1, 2);
      put_field(extra, 24, 2);
      put_field(extra, size, 8);
      put_field(extra, data.size(), 8);
      put_field(extra, offset, 8);
    }
    auto header = [&](bool central) {
      std::string h;
      put_field(h, central ? 0x02014b50 : 0x04034b50, 4);
      if (central) put_field(h, zip64 ? 45 : 20, 2);  // made by
      put_field(h, zip64 ? 45 : 20, 2);               // needed to extract
      put_field(h, 0, 2);                             // flags
      put_field(h, method, 2);
      put_field(h, 0, 4);  // time, date
      put_field(h, crc, 4);
      put_field(h, zip64 ? 0xffffffff : data.size(), 4);
      put_field(h, zip64 ? 0xffffffff : size, 4);
      put_field(h, record.name.size(), 2);
      put_field(h, extra.size(), 2);
      if (central) {
        put_field(h, 0, 2);  // comment
        put_field(h, 0, 2);  // disk
        put_field(h, 0, 2);  // internal attributes
        put_field(h, 0, 4);  // external attributes
        put_field(h, zip64 ? 0xffffffff : offset, 4);
      }
      return h + record.name + extra;
    };
    out += header(false) + data;
    directory += header(true);
  }
  const uint64_t directory_offset = out.size();
  out += directory;
  if (zip64) put_zip64_end(out, records.size(), directory.size(), directory_offset);
  put_field(out, 0x06054b50, 4);
  put_field(out, 0, 4);  // disks
  put_field(out, zip64 ? 0xffff : records.size(), 2);
  put_field(out, zip64 ? 0xffff : records.size(), 2);
  put_field(out, zip64 ? 0xffffffff : directory.size(), 4);
  put_field(out, zip64 ? 0xffffffff : directory_offset, 4);
  put_field(out, 0, 2);  // comment
  return out;
}

}  // namespace dist::testing
