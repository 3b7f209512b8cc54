// TFRecord files: the library's reader against files built here byte by byte from the format's
// specification (include/dist/data/tfrecord.h), its writer against the same bytes and against
// the independent reader of tests/tfrecord_reader.h, and every kind of damage.
#include "dist/data/tfrecord.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "data/records/tfrecord_file.h"
#include "dist/core/error.h"
#include "expect_error.h"
#include "test_envs.h"
#include "test_util.h"
#include "tfrecord_reader.h"

namespace dist::data {
namespace {

using detail::TFRecordFileReader;
using testing::contains;
using testing::read_file;
using testing::reference_crc32c;
using testing::reference_mask;
using testing::TempDir;
using testing::write_file;

void put_le(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

// One record framed by hand: length, masked CRC of the 8 length bytes, data, masked CRC of data.
std::string framed(const std::string& data) {
  std::string length;
  put_le(&length, data.size(), 8);
  std::string out = length;
  put_le(&out, reference_mask(reference_crc32c(length)), 4);
  out += data;
  put_le(&out, reference_mask(reference_crc32c(data)), 4);
  return out;
}

std::string framed_all(const std::vector<std::string>& records) {
  std::string out;
  for (const auto& r : records) out += framed(r);
  return out;
}

// A gzip member (RFC 1952) by hand: a 10-byte header (magic 1f 8b, method 8 = deflate, no flags,
// no mtime, OS 255 = unknown), the data as deflate STORED blocks (RFC 1951 3.2.4: a byte holding
// BFINAL and BTYPE 00, then LEN and its complement NLEN, little-endian, then LEN raw bytes), the
// CRC-32 of the data and its size mod 2^32.
std::string gzip_stored(const std::string& data) {
  std::string out = {'\x1f', '\x8b', '\x08', 0, 0, 0, 0, 0, 0, '\xff'};
  size_t at = 0;
  do {
    const size_t n = std::min<size_t>(data.size() - at, 65535);
    const bool last = at + n == data.size();
    out.push_back(last ? 1 : 0);
    put_le(&out, n, 2);
    put_le(&out, ~n & 0xFFFF, 2);
    out.append(data, at, n);
    at += n;
  } while (at < data.size());
  put_le(&out, crc32(0, reinterpret_cast<const Bytef*>(data.data()), data.size()), 4);
  put_le(&out, data.size() & 0xFFFFFFFFu, 4);
  return out;
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

std::vector<std::string> read_all(const std::string& path, Compression c) {
  TFRecordFileReader reader(path, c);
  std::vector<std::string> records;
  for (std::string r; reader.next(&r);) records.push_back(r);
  return records;
}

void write_all(const std::string& path, Compression c, const std::vector<std::string>& records) {
  TFRecordWriter writer(path, c);
  for (const auto& r : records) writer.write(r);
  writer.close();
}

using testing::data_error_or_none;

const std::vector<std::string> kSample = {"", "a", "hello, TFRecord", std::string(300, '\xab'),
                                          std::string("\0\x01\x02", 3)};
const Compression kAll[] = {Compression::kNone, Compression::kGzip, Compression::kZlib};

TEST(TFRecordTest, ReadsAFileBuiltByHand) {
  TempDir dir;
  write_file(dir.file("a.tfrecord"), framed_all(kSample));
  TFRecordFileReader reader(dir.file("a.tfrecord"), Compression::kNone);
  uint64_t offset = 0;
  for (size_t i = 0; i < kSample.size(); ++i) {
    EXPECT_EQ(reader.records_read(), static_cast<int64_t>(i));
    EXPECT_EQ(reader.offset(), offset);
    std::string record = "stale";
    ASSERT_TRUE(reader.next(&record));
    EXPECT_EQ(record, kSample[i]);
    offset += 16 + kSample[i].size();
  }
  std::string record;
  EXPECT_FALSE(reader.next(&record));
  EXPECT_FALSE(reader.next(&record));  // stays at the end
  EXPECT_EQ(reader.records_read(), 5);
  EXPECT_EQ(reader.offset(), offset);
}

TEST(TFRecordTest, AnEmptyFileHasNoRecords) {
  TempDir dir;
  write_file(dir.file("empty"), "");
  for (Compression c : kAll) {
    EXPECT_TRUE(read_all(dir.file("empty"), c).empty());
    EXPECT_EQ(detail::count_records(dir.file("empty"), c), 0);
  }
}

TEST(TFRecordTest, ReadsAGzipFileBuiltByHand) {
  TempDir dir;
  // The gzip container checked first with zlib itself, so a failure below is the reader's.
  const std::string plain = framed_all(kSample);
  write_file(dir.file("a.gz"), gzip_stored(plain));
  gzFile gz = gzopen(dir.file("a.gz").c_str(), "rb");
  ASSERT_NE(gz, nullptr);
  std::string check(plain.size() + 10, '\0');
  EXPECT_EQ(gzread(gz, check.data(), static_cast<unsigned>(check.size())),
            static_cast<int>(plain.size()));
  gzclose(gz);
  ASSERT_EQ(check.substr(0, plain.size()), plain);

  EXPECT_EQ(read_all(dir.file("a.gz"), Compression::kGzip), kSample);
  // Several stored blocks (a 200 KB record), and two gzip members one after the other, which a
  // gzip file may hold (RFC 1952 2.2).
  const std::vector<std::string> big = {random_bytes(200000, 1), "x"};
  write_file(dir.file("b.gz"), gzip_stored(framed_all(big)) + gzip_stored(plain));
  std::vector<std::string> expected = big;
  expected.insert(expected.end(), kSample.begin(), kSample.end());
  EXPECT_EQ(read_all(dir.file("b.gz"), Compression::kGzip), expected);
  EXPECT_EQ(detail::count_records(dir.file("b.gz"), Compression::kGzip), 7);
}

TEST(TFRecordTest, WriterOutputIsTheSpecifiedBytes) {
  TempDir dir;
  write_all(dir.file("w.tfrecord"), Compression::kNone, kSample);
  EXPECT_EQ(read_file(dir.file("w.tfrecord")), framed_all(kSample));
  std::string error;
  EXPECT_EQ(testing::read_tfrecords(dir.file("w.tfrecord"), &error), kSample);
  EXPECT_EQ(error, "");

  // Compressed: the stream decompressed by zlib directly is the same framing.
  write_all(dir.file("w.gz"), Compression::kGzip, kSample);
  gzFile gz = gzopen(dir.file("w.gz").c_str(), "rb");
  ASSERT_NE(gz, nullptr);
  std::string plain(framed_all(kSample).size() + 10, '\0');
  plain.resize(static_cast<size_t>(gzread(gz, plain.data(), static_cast<unsigned>(plain.size()))));
  gzclose(gz);
  EXPECT_EQ(plain, framed_all(kSample));

  write_all(dir.file("w.z"), Compression::kZlib, kSample);
  const std::string z = read_file(dir.file("w.z"));
  EXPECT_EQ(static_cast<uint8_t>(z[0]) & 0x0F, 8);  // zlib header: CM = 8 (deflate)
  uLongf n = static_cast<uLongf>(framed_all(kSample).size() + 10);
  std::string out(n, '\0');
  ASSERT_EQ(uncompress(reinterpret_cast<Bytef*>(out.data()), &n,
                       reinterpret_cast<const Bytef*>(z.data()), z.size()),
            Z_OK);
  out.resize(n);
  EXPECT_EQ(out, framed_all(kSample));
}

TEST(TFRecordTest, RoundTripsEveryCompression) {
  TempDir dir;
  std::vector<std::string> records = {"", "1", random_bytes(1536 * 1024, 2), ""};
  for (int i = 0; i < 1000; ++i) records.push_back(random_bytes(i % 97, 100 + i));
  records.push_back(random_bytes(300 * 1024, 3));  // about the buffer size, after small ones
  for (Compression c : kAll) {
    SCOPED_TRACE(compression_name(c));
    const std::string path = dir.file(std::string("r.") + compression_name(c));
    write_all(path, c, records);
    EXPECT_EQ(read_all(path, c), records);
    EXPECT_EQ(detail::count_records(path, c), static_cast<int64_t>(records.size()));
  }
  // Compression does compress (the small records repeat nothing, the zeros of "" do).
  write_all(dir.file("zeros.gz"), Compression::kGzip, {std::string(1 << 20, '\0')});
  EXPECT_LT(read_file(dir.file("zeros.gz")).size(), 10000u);
}

TEST(TFRecordTest, SkipAndCountAgreeWithNext) {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 200; ++i) records.push_back(random_bytes(i * 37 % 5000, i));
  records.push_back(random_bytes(700 * 1024, 9));  // skipped by a seek, uncompressed
  records.push_back("last");
  for (Compression c : kAll) {
    SCOPED_TRACE(compression_name(c));
    const std::string path = dir.file(std::string("s.") + compression_name(c));
    write_all(path, c, records);
    TFRecordFileReader all(path, c);
    TFRecordFileReader some(path, c);
    std::string a, b;
    for (size_t i = 0; i < records.size(); ++i) {
      ASSERT_EQ(some.records_read(), all.records_read());
      ASSERT_EQ(some.offset(), all.offset());
      ASSERT_TRUE(all.next(&a));
      if (i % 3 == 0) {
        ASSERT_TRUE(some.next(&b));
        EXPECT_EQ(b, a) << i;
      } else {
        ASSERT_TRUE(some.skip());
      }
    }
    EXPECT_FALSE(some.skip());
    EXPECT_FALSE(some.next(&b));
    EXPECT_EQ(some.offset(), all.offset());
    EXPECT_EQ(detail::count_records(path, c), static_cast<int64_t>(records.size()));
  }
}

TEST(TFRecordTest, ACorruptDataByteIsACrcError) {
  TempDir dir;
  std::string bytes = framed_all({"first", "second record", "third"});
  bytes[21 + 12 + 3] ^= 0x10;  // record 1 starts at 21 (12 + 5 + 4); a byte of its data
  write_file(dir.file("bad"), bytes);
  TFRecordFileReader reader(dir.file("bad"), Compression::kNone);
  std::string record;
  ASSERT_TRUE(reader.next(&record));
  const std::string message = data_error_or_none([&] { reader.next(&record); });
  EXPECT_TRUE(contains(message, dir.file("bad"))) << message;
  EXPECT_TRUE(contains(message, "record 1 (at offset 21) is corrupt")) << message;
  EXPECT_TRUE(contains(message, "CRC of its 13 data bytes")) << message;
  // The record was passed whole and the framing is intact: the reader goes on with the next
  // record (ignore_errors skips just the damaged one). skip() does not check the data, so
  // counting passes over it.
  EXPECT_FALSE(reader.failed());
  ASSERT_TRUE(reader.next(&record));
  EXPECT_EQ(record, "third");
  EXPECT_FALSE(reader.next(&record));
  EXPECT_EQ(detail::count_records(dir.file("bad"), Compression::kNone), 3);
}

TEST(TFRecordTest, ACorruptLengthCrcIsAnError) {
  TempDir dir;
  std::string bytes = framed_all({"first", "second record"});
  bytes[21 + 9] ^= 0x01;  // record 1's length CRC
  write_file(dir.file("bad"), bytes);
  for (bool skip : {false, true}) {
    TFRecordFileReader reader(dir.file("bad"), Compression::kNone);
    std::string record;
    ASSERT_TRUE(reader.next(&record));
    const std::string message =
        data_error_or_none([&] { skip ? reader.skip() : reader.next(&record); });
    EXPECT_TRUE(contains(message, "record 1 (at offset 21) is corrupt: the CRC of its length"))
        << message;
    // Without a length to trust the framing is lost: the error sticks.
    EXPECT_TRUE(reader.failed());
    EXPECT_EQ(data_error_or_none([&] { reader.next(&record); }), message);
  }
  // A length corrupted with its CRC fixed up is caught by the size check, before allocating.
  std::string length;
  put_le(&length, uint64_t{1} << 40, 8);
  std::string huge = length;
  put_le(&huge, reference_mask(reference_crc32c(length)), 4);
  write_file(dir.file("huge"), huge + "data");
  const std::string message =
      data_error_or_none([&] { read_all(dir.file("huge"), Compression::kNone); });
  EXPECT_TRUE(contains(message, "record 0 (at offset 0) claims 1099511627776 bytes")) << message;
  EXPECT_TRUE(contains(message, "2 GiB")) << message;
}

TEST(TFRecordTest, ATruncatedFileSaysWhereItEnds) {
  TempDir dir;
  const std::vector<std::string> records = {"0123456789", "abcdefghijklmnopqrst"};
  const std::string bytes = framed_all(records);  // 26 + 36 bytes
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    if (cut == 26) continue;  // a record boundary: a shorter, valid file
    SCOPED_TRACE(cut);
    write_file(dir.file("t"), bytes.substr(0, cut));
    const std::string message =
        data_error_or_none([&] { read_all(dir.file("t"), Compression::kNone); });
    EXPECT_TRUE(contains(message, ": truncated")) << message;
    EXPECT_TRUE(contains(message, dir.file("t"))) << message;
    const std::string counted =
        data_error_or_none([&] { detail::count_records(dir.file("t"), Compression::kNone); });
    EXPECT_TRUE(contains(counted, ": truncated")) << counted;
    // The same cut inside the compressed stream.
    write_file(dir.file("t.gz"), gzip_stored(bytes.substr(0, cut)));
    const std::string gz =
        data_error_or_none([&] { read_all(dir.file("t.gz"), Compression::kGzip); });
    EXPECT_TRUE(contains(gz, ": truncated")) << gz;
  }
  write_file(dir.file("t"), bytes.substr(0, 26 + 5));
  EXPECT_TRUE(contains(data_error_or_none([&] { read_all(dir.file("t"), Compression::kNone); }),
                       "the file ends 5 bytes into record 1's 12-byte header (length and its "
                       "CRC) at offset 26: truncated"));
  write_file(dir.file("t"), bytes.substr(0, 26 + 12 + 7));
  EXPECT_TRUE(contains(data_error_or_none([&] { read_all(dir.file("t"), Compression::kNone); }),
                       "the file ends 7 bytes into record 1's data of 20 bytes (record at "
                       "offset 26): truncated"));
  write_file(dir.file("t"), bytes.substr(0, 26 + 12 + 20 + 2));
  EXPECT_TRUE(contains(data_error_or_none([&] { read_all(dir.file("t"), Compression::kNone); }),
                       "the file ends 2 bytes into record 1's 4-byte data CRC, after its 20 data "
                       "bytes (record at offset 26): truncated"));
  // A gzip stream cut after the records (in its trailer) is truncated too.
  const std::string gz = gzip_stored(bytes);
  write_file(dir.file("t.gz"), gz.substr(0, gz.size() - 3));
  EXPECT_TRUE(contains(data_error_or_none([&] { read_all(dir.file("t.gz"), Compression::kGzip); }),
                       "the gzip stream is truncated"));
}

TEST(TFRecordTest, ACorruptCompressedStreamIsAnError) {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 50; ++i) records.push_back(std::string(100, static_cast<char>('a' + i % 7)));
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    const std::string path = dir.file(std::string("c.") + compression_name(c));
    write_all(path, c, records);
    std::string bytes = read_file(path);
    bytes[bytes.size() / 2] ^= 0x55;
    write_file(path, bytes);
    const std::string message = data_error_or_none([&] { read_all(path, c); });
    EXPECT_TRUE(contains(message, path)) << message;
    EXPECT_TRUE(contains(message, "corrupt") || contains(message, "CRC")) << message;
  }
  // Garbage after a zlib stream's end.
  write_all(dir.file("z"), Compression::kZlib, {"x"});
  write_file(dir.file("z"), read_file(dir.file("z")) + "junk");
  EXPECT_TRUE(contains(data_error_or_none([&] { read_all(dir.file("z"), Compression::kZlib); }),
                       "4 more bytes follow it"));
  // A plain file read as gzip.
  write_all(dir.file("plain"), Compression::kNone, {"x"});
  EXPECT_TRUE(contains(data_error_or_none([&] { read_all(dir.file("plain"), Compression::kGzip); }),
                       "the gzip stream is corrupt"));
}

TEST(TFRecordTest, OnlyRegularFilesOpen) {
  TempDir dir;
  EXPECT_TRUE(
      contains(data_error_or_none([&] { TFRecordFileReader(dir.path(), Compression::kNone); }),
               dir.path() + " is not a regular file but a directory: give a TFRecord file"));
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  // Opening a FIFO would block until a writer came: the reader must refuse it first.
  EXPECT_TRUE(contains(
      data_error_or_none([&] { TFRecordFileReader(dir.file("fifo"), Compression::kGzip); }),
      "is not a regular file but a FIFO (named pipe): give a TFRecord file"));
  EXPECT_TRUE(contains(
      data_error_or_none([&] { detail::count_records(dir.file("fifo"), Compression::kNone); }),
      "FIFO"));
  EXPECT_TRUE(contains(
      data_error_or_none([&] { TFRecordFileReader(dir.file("nope"), Compression::kNone); }),
      "TFRecord file " + dir.file("nope") + " does not exist"));
}

TEST(TFRecordTest, CompressionNames) {
  EXPECT_EQ(compression_from_name(""), Compression::kNone);
  EXPECT_EQ(compression_from_name("NONE"), Compression::kNone);
  EXPECT_EQ(compression_from_name("GZIP"), Compression::kGzip);
  EXPECT_EQ(compression_from_name("ZLIB"), Compression::kZlib);
  for (Compression c : kAll) EXPECT_EQ(compression_from_name(compression_name(c)), c);
  const std::string message =
      testing::message_of<InvalidArgument>([] { compression_from_name("gzip"); });
  EXPECT_TRUE(contains(message, "'gzip'")) << message;
  EXPECT_TRUE(contains(message, "\"GZIP\" and \"ZLIB\"")) << message;
}

TEST(TFRecordTest, AWriterThatIsNotClosedLeavesNothing) {
  TempDir dir;
  const std::string path = dir.file("out.tfrecord");
  {
    TFRecordWriter writer(path, Compression::kGzip);
    writer.write("partial");
    EXPECT_EQ(testing::files_in(dir.path()), std::vector<std::string>{"out.tfrecord.partial"});
  }  // as if an exception ended the conversion
  EXPECT_TRUE(testing::files_in(dir.path()).empty());
  {
    TFRecordWriter writer(path);
    writer.write("done");
    EXPECT_EQ(writer.records(), 1);
    writer.close();
    writer.close();  // a no-op
    EXPECT_THROW(writer.write("more"), InvalidArgument);
  }
  EXPECT_EQ(testing::files_in(dir.path()), std::vector<std::string>{"out.tfrecord"});
  EXPECT_EQ(read_all(path, Compression::kNone), std::vector<std::string>{"done"});
}

TEST(TFRecordTest, WriterErrorsNameTheFile) {
  TempDir dir;
  // A directory where the file should go.
  const std::string message =
      testing::message_of<InvalidArgument>([&] { TFRecordWriter writer(dir.path()); });
  EXPECT_TRUE(contains(message, dir.path() + " exists and is a directory")) << message;
  // A directory that does not exist.
  const std::string missing = dir.file("no/such/dir/x.tfrecord");
  const std::string open_error = data_error_or_none([&] { TFRecordWriter writer(missing); });
  EXPECT_TRUE(contains(open_error, missing + ".partial")) << open_error;
  EXPECT_TRUE(contains(open_error, "No such file or directory")) << open_error;
  // A full disk, while writing records and while finishing the stream.
  for (Compression c : kAll) {
    SCOPED_TRACE(compression_name(c));
    testing::DiskFullEnv full(1000);
    const std::string path = dir.file("full");
    const std::string error = data_error_or_none([&] {
      TFRecordWriter writer(path, c, &full);
      for (int i = 0; i < 100; ++i) writer.write(random_bytes(100, i));
      writer.close();
    });
    EXPECT_TRUE(contains(error, path + ".partial")) << error;
    EXPECT_TRUE(contains(error, "No space left on device")) << error;
    EXPECT_TRUE(testing::files_in(dir.path()).empty());
  }
}

}  // namespace
}  // namespace dist::data
