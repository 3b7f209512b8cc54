// The zip walk of verify_archive (torchscript_archive.h). Field offsets are those of PKWARE's
// APPNOTE.TXT (sections 4.3.7, 4.3.12, 4.3.14 to 4.3.16, 4.5.3); all integers little-endian.
#include "models/torchscript_archive.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "dist/core/error.h"

namespace dist::models {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr size_t kEndSize = 22, kZip64EndSize = 56, kLocatorSize = 20;
constexpr size_t kCentralSize = 46, kLocalSize = 30;
constexpr uint16_t kStored = 0, kDeflated = 8;
// torch.jit.save stores tensors and pickles as they are and deflates only the code and its
// debug information, which are small beside the file; more than the file's size plus this,
// in all, is a zip bomb (PyTorch's reader allocates each record's declared size at once).
constexpr uint64_t kDeflatedAllowance = uint64_t{64} << 20;
constexpr size_t kChunk = size_t{1} << 20;

uint64_t little_endian(const unsigned char* bytes, int count) {
  uint64_t value = 0;
  for (int i = count - 1; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

struct Record {
  std::string name;
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;
  uint64_t stored_size = 0, size = 0, header_offset = 0, data_offset = 0;
};

// The archive's bytes, each read bounded by the file: a field past its end is a damaged file.
class ArchiveFile {
 public:
  ArchiveFile(const std::string& path, const RandomAccessFile& file) : path_(path), file_(file) {}

  uint64_t size() const { return file_.size(); }
  const std::string& path() const { return path_; }

  std::vector<unsigned char> read(uint64_t offset, uint64_t count, const std::string& what) const {
    if (offset > size() || count > size() - offset)
      fail(what, " (", count, " bytes at byte ", offset, ") lies past the file's end (", size(),
           " bytes)");
    std::vector<unsigned char> bytes(static_cast<size_t>(count));
    if (count > 0) file_.read(offset, bytes.size(), bytes.data());
    return bytes;
  }

  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    throw DataError(detail::concat("TorchScript file '", path_, "' is damaged: ", parts...,
                                   "; copy the file again from where it was written, or ",
                                   kHowToSave));
  }

 private:
  const std::string& path_;
  const RandomAccessFile& file_;
};

struct Directory {
  uint64_t offset = 0, size = 0, entries = 0;
};

// The end of central directory record: searched backwards, as it ends in a comment of up to
// 64 KiB; through zip64's locator and record when a field holds its 0xff.. placeholder.
Directory find_directory(const ArchiveFile& archive) {
  const uint64_t tail_size = std::min<uint64_t>(archive.size(), kEndSize + 0xffff);
  const auto tail = archive.read(archive.size() - tail_size, tail_size, "the archive's end");
  size_t at = tail.size() < kEndSize ? 0 : tail.size() - kEndSize + 1;
  do {
    if (at == 0)
      throw DataError(detail::concat(
          "TorchScript file '", archive.path(),
          "' is truncated: it starts as a zip archive but its end (the archive's central "
          "directory) is missing, as after an interrupted copy or save; copy or save it again"));
    --at;
  } while (little_endian(&tail[at], 4) != kEndOfDirectory);
  const unsigned char* end = &tail[at];
  const uint64_t end_offset = archive.size() - tail_size + at;
  if (little_endian(end + 4, 2) != 0 || little_endian(end + 6, 2) != 0)
    archive.fail("it is one part of a zip archive spanning several disks (disk ",
                 little_endian(end + 4, 2), "), which PyTorch does not write");
  Directory directory{little_endian(end + 16, 4), little_endian(end + 12, 4),
                      little_endian(end + 10, 2)};
  const bool zip64 =
      directory.offset == 0xffffffff || directory.size == 0xffffffff || directory.entries == 0xffff;
  if (!zip64) return directory;
  if (end_offset < kLocatorSize) archive.fail("its zip64 end of central directory is missing");
  const auto locator = archive.read(end_offset - kLocatorSize, kLocatorSize, "the zip64 locator");
  if (little_endian(locator.data(), 4) != kZip64Locator)
    archive.fail("its end of central directory says zip64 but no zip64 locator precedes it");
  const auto end64 = archive.read(little_endian(&locator[8], 8), kZip64EndSize,
                                  "the zip64 end of central directory");
  if (little_endian(end64.data(), 4) != kZip64EndOfDirectory)
    archive.fail("its zip64 locator points at no zip64 end of central directory");
  return {little_endian(&end64[48], 8), little_endian(&end64[40], 8), little_endian(&end64[32], 8)};
}

// The zip64 extended information field (id 1) holds, in this order, each of the uncompressed
// size, the compressed size and the local header's offset whose 32-bit field is 0xffffffff.
void read_zip64_extra(const ArchiveFile& archive, const unsigned char* extra, size_t length,
                      Record& record) {
  for (size_t at = 0; at + 4 <= length;) {
    const uint64_t id = little_endian(extra + at, 2), size = little_endian(extra + at + 2, 2);
    if (at + 4 + size > length) break;
    if (id == 1) {
      size_t field = at + 4;
      for (uint64_t* value : {&record.size, &record.stored_size, &record.header_offset}) {
        if (*value != 0xffffffff) continue;
        if (field + 8 > at + 4 + size)
          archive.fail("the zip64 field of record '", record.name, "' is too short");
        *value = little_endian(extra + field, 8);
        field += 8;
      }
      return;
    }
    at += 4 + size;
  }
}

std::vector<Record> read_directory(const ArchiveFile& archive, const Directory& directory) {
  const auto bytes = archive.read(directory.offset, directory.size, "the central directory");
  std::vector<Record> records;
  size_t at = 0;
  for (uint64_t i = 0; i < directory.entries; ++i) {
    if (at + kCentralSize > bytes.size() || little_endian(&bytes[at], 4) != kCentralHeader)
      archive.fail("its central directory ends after ", i, " of its ", directory.entries,
                   " records");
    const unsigned char* header = &bytes[at];
    const size_t name_length = little_endian(header + 28, 2);
    const size_t extra_length = little_endian(header + 30, 2);
    const size_t comment_length = little_endian(header + 32, 2);
    if (at + kCentralSize + name_length + extra_length + comment_length > bytes.size())
      archive.fail("its central directory's record ", i, " runs past the directory's end");
    Record record;
    record.name.assign(reinterpret_cast<const char*>(header + kCentralSize), name_length);
    record.flags = static_cast<uint16_t>(little_endian(header + 8, 2));
    record.method = static_cast<uint16_t>(little_endian(header + 10, 2));
    record.crc = static_cast<uint32_t>(little_endian(header + 16, 4));
    record.stored_size = little_endian(header + 20, 4);
    record.size = little_endian(header + 24, 4);
    record.header_offset = little_endian(header + 42, 4);
    read_zip64_extra(archive, header + kCentralSize + name_length, extra_length, record);
    records.push_back(std::move(record));
    at += kCentralSize + name_length + extra_length + comment_length;
  }
  return records;
}

// What each record's central header says against its local header, and where its data lie.
void locate_data(const ArchiveFile& archive, Record& record) {
  const auto local = archive.read(record.header_offset, kLocalSize,
                                  "the local header of record '" + record.name + "'");
  if (little_endian(local.data(), 4) != kLocalHeader)
    archive.fail("record '", record.name, "' has no local header at byte ", record.header_offset,
                 ", where the central directory says it is");
  const uint64_t name_length = little_endian(&local[26], 2);
  const uint64_t extra_length = little_endian(&local[28], 2);
  const auto name = archive.read(record.header_offset + kLocalSize, name_length,
                                 "the local name of record '" + record.name + "'");
  if (std::string(name.begin(), name.end()) != record.name)
    archive.fail("record '", record.name, "' has the local name '",
                 std::string(name.begin(), name.end()), "'");
  record.data_offset = record.header_offset + kLocalSize + name_length + extra_length;
}

void check_sizes(const ArchiveFile& archive, std::vector<Record>& records,
                 const Directory& directory) {
  uint64_t deflated = 0;
  const Record* largest = nullptr;
  for (Record& record : records) {
    if (record.flags & 1)
      archive.fail("record '", record.name, "' is encrypted, which PyTorch does not write");
    if (record.method != kStored && record.method != kDeflated)
      archive.fail("record '", record.name, "' uses compression method ", record.method,
                   " (PyTorch's reader reads stored (0) and deflated (8) records only)");
    if (record.method == kStored && record.stored_size != record.size)
      archive.fail("record '", record.name, "' is stored (not compressed) in ", record.stored_size,
                   " bytes but declares ", record.size, " bytes uncompressed");
    if (record.method == kDeflated) {
      deflated += std::min(record.size, ~uint64_t{0} - deflated);
      if (largest == nullptr || record.size > largest->size) largest = &record;
    }
    locate_data(archive, record);
    if (record.data_offset > directory.offset ||
        record.stored_size > directory.offset - record.data_offset)
      archive.fail("record '", record.name, "' (", record.stored_size, " bytes at byte ",
                   record.data_offset, ") runs into the central directory at byte ",
                   directory.offset);
  }
  if (deflated > archive.size() + kDeflatedAllowance)
    archive.fail("its compressed records declare ", deflated,
                 " bytes uncompressed in all (record '", largest->name, "' alone ", largest->size,
                 "), for a file of ", archive.size(),
                 " bytes: a zip bomb (torch.jit.save compresses only the code, which is "
                 "small); it was refused before anything was allocated");
  // Records sharing bytes are how a small file declares many large ones.
  std::vector<const Record*> by_offset;
  for (const Record& record : records) by_offset.push_back(&record);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Record* a, const Record* b) { return a->header_offset < b->header_offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const Record& before = *by_offset[i - 1];
    if (before.data_offset + before.stored_size > by_offset[i]->header_offset)
      archive.fail("records '", before.name, "' and '", by_offset[i]->name, "' overlap");
  }
}

// The CRC-32 and size of a stored record's bytes.
std::pair<uint32_t, uint64_t> stored_crc(const ArchiveFile& archive, const Record& record) {
  uLong crc = crc32(0, nullptr, 0);
  for (uint64_t done = 0; done < record.stored_size;) {
    const uint64_t count = std::min<uint64_t>(kChunk, record.stored_size - done);
    const auto bytes =
        archive.read(record.data_offset + done, count, "record '" + record.name + "'");
    crc = crc32(crc, bytes.data(), static_cast<uInt>(bytes.size()));
    done += count;
  }
  return {static_cast<uint32_t>(crc), record.stored_size};
}

// The CRC-32 and size of a deflated record's inflated bytes, inflated a chunk at a time (never
// more than its declared size: a record inflating beyond it is refused there).
std::pair<uint32_t, uint64_t> deflated_crc(const ArchiveFile& archive, const Record& record) {
  const auto input =
      archive.read(record.data_offset, record.stored_size, "record '" + record.name + "'");
  z_stream stream{};
  if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) throw std::bad_alloc();
  stream.next_in = const_cast<Bytef*>(input.data());
  std::vector<unsigned char> output(kChunk);
  uLong crc = crc32(0, nullptr, 0);
  uint64_t total = 0;
  int status = Z_OK;
  uint64_t left = input.size();
  while (status == Z_OK) {
    const uInt feed = static_cast<uInt>(std::min<uint64_t>(left, kChunk));
    stream.avail_in += feed;
    left -= feed;
    stream.next_out = output.data();
    stream.avail_out = static_cast<uInt>(output.size());
    status = inflate(&stream, Z_NO_FLUSH);
    const size_t produced = output.size() - stream.avail_out;
    crc = crc32(crc, output.data(), static_cast<uInt>(produced));
    total += produced;
    if (total > record.size) break;
    if (status == Z_BUF_ERROR && left > 0) status = Z_OK;  // wants the next chunk of input
  }
  inflateEnd(&stream);
  if (total <= record.size && status != Z_STREAM_END)
    archive.fail("record '", record.name, "' is not valid deflate data (",
                 stream.msg != nullptr ? stream.msg : "it ends early", ")");
  return {static_cast<uint32_t>(crc), total};
}

void check_contents(const ArchiveFile& archive, const Record& record) {
  const auto [crc, size] =
      record.method == kStored ? stored_crc(archive, record) : deflated_crc(archive, record);
  if (size != record.size)
    archive.fail("record '", record.name, "' declares ", record.size, " bytes but inflates to ",
                 size > record.size ? "more" : std::to_string(size));
  if (crc != record.crc) {
    char computed[16], declared[16];
    std::snprintf(computed, sizeof(computed), "%08x", crc);
    std::snprintf(declared, sizeof(declared), "%08x", record.crc);
    archive.fail("record '", record.name, "' (", record.size, " bytes) has CRC-32 ", computed,
                 " where the archive's directory says ", declared,
                 ": its bytes changed after they were written");
  }
}

}  // namespace

ArchiveIndex verify_archive(const std::string& path, const RandomAccessFile& file) {
  const ArchiveFile archive(path, file);
  const Directory directory = find_directory(archive);
  std::vector<Record> records = read_directory(archive, directory);
  check_sizes(archive, records, directory);
  ArchiveIndex index;
  if (!records.empty())
    index.folder = records.front().name.substr(0, records.front().name.find('/'));
  for (const Record& record : records) {
    if (!index.sizes.emplace(record.name, record.size).second)
      archive.fail("the archive holds two records named '", record.name, "'");
  }
  for (const Record& record : records) check_contents(archive, record);
  return index;
}

}  // namespace dist::models
