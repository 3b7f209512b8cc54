// Every data reader opens, lists and reads through an Env (env.h), so a short read, an EIO and a
// file that vanishes between listing and opening reach each of them: each must give a DataError
// naming the file (or be skipped under ignore_errors), never a crash or a hang.
#include <fnmatch.h>
#include <glob.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <zlib.h>

#include <filesystem>

#include "core/path_match.h"
#include "data/fault_env.h"
#include "data/records/tfrecord_file.h"
#include "dist/core/error.h"
#include "dist/data/files.h"
#include "dist/data/idx_reader.h"
#include "dist/data/ignored_errors.h"
#include "dist/data/image_folder.h"
#include "dist/data/mnist.h"
#include "dist/data/tfrecord.h"
#include "dist/data/tfrecord_dataset.h"
#include "dist/train/image_io.h"
#include "test_util.h"

namespace dist::data {
namespace {

using testing::contains;
using testing::Fault;
using testing::FaultEnv;
using testing::message_of;
using testing::TempDir;

constexpr Fault kFaults[] = {Fault::kShortRead, Fault::kReadError, Fault::kVanish};

const char* name_of(Fault fault) {
  switch (fault) {
    case Fault::kShortRead:
      return "short read";
    case Fault::kReadError:
      return "EIO";
    case Fault::kVanish:
      return "vanished";
  }
  return "?";
}

// What each fault's message says, besides the file's name.
const char* reason_of(Fault fault) {
  switch (fault) {
    case Fault::kShortRead:
      return "unexpected end of file";
    case Fault::kReadError:
      return "Input/output error";
    case Fault::kVanish:
      return "No such file or directory";
  }
  return "?";
}

int64_t count_elements(Iterator it) {
  int64_t n = 0;
  while (it.next()) ++n;
  return n;
}

std::string gzipped(const std::string& bytes) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, bytes.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// Records that do not compress away: a gzip file of them spans several reads.
std::vector<std::string> records(int count, size_t bytes) {
  std::vector<std::string> out;
  uint32_t x = 12345;
  for (int r = 0; r < count; ++r) {
    std::string record(bytes, '\0');
    for (auto& c : record) c = static_cast<char>((x = x * 1103515245 + 12345) >> 24);
    out.push_back(record);
  }
  return out;
}

void write_records(Env* env, const std::string& path, Compression c,
                   const std::vector<std::string>& all) {
  TFRecordWriter writer(path, c, env);
  for (const auto& r : all) writer.write(r);
  writer.close();
}

// 40 records of 20,000 bytes (20,016 framed). A fault at byte kReadBufferBytes + 1 lets the
// first read of the file (one buffer) through: the records wholly inside it are delivered, then
// the fault names the file.
TEST(ReaderFaultTest, TFRecordReaderNamesTheFileAndKeepsWhatCameBefore) {
  TempDir dir;  // the MemoryEnv's paths lie in it, so nothing real is ever touched
  MemoryEnv memory;
  FaultEnv env(&memory);
  const auto all = records(40, 20000);
  const int64_t before = static_cast<int64_t>(detail::kReadBufferBytes / 20016);  // 13
  for (Compression c : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    for (Fault fault : kFaults) {
      SCOPED_TRACE(std::string(compression_name(c)) + ", " + name_of(fault));
      const std::string path = dir.file("a.tfrecord");
      write_records(&env, path, c, all);
      env.inject(path, fault, detail::kReadBufferBytes + 1);
      int64_t read = 0;
      const std::string message = message_of<DataError>([&] {
        detail::TFRecordFileReader reader(path, c, &env);
        std::string record;
        while (reader.next(&record)) {
          EXPECT_EQ(record, all[read]);
          ++read;
        }
      });
      EXPECT_TRUE(contains(message, path)) << message;
      EXPECT_TRUE(contains(message, reason_of(fault))) << message;
      // Uncompressed, exactly the records in the first buffer; compressed, fewer than all (the
      // compressed bytes before the fault hold some).
      if (c == Compression::kNone) {
        EXPECT_EQ(read, fault == Fault::kVanish ? 0 : before);
      }
      EXPECT_LT(read, 40);
      // Counting seeks over an uncompressed file's data: the byte with the EIO is never read.
      if (c == Compression::kNone && fault == Fault::kReadError) {
        EXPECT_EQ(detail::count_records(path, c, &env), 40);
        continue;
      }
      const std::string counted =
          message_of<DataError>([&] { detail::count_records(path, c, &env); });
      EXPECT_TRUE(contains(counted, path)) << counted;
    }
  }
}

// Under ignore_errors a faulty file ends after its good records and the next file is read:
// no hang on a file that cannot be opened, no record twice.
TEST(ReaderFaultTest, TFRecordDatasetSkipsAFaultyFileUnderIgnoreErrors) {
  TempDir dir;
  MemoryEnv memory;
  FaultEnv env(&memory);
  const auto big = records(40, 20000);
  const auto small = records(3, 10);
  for (Fault fault : kFaults) {
    SCOPED_TRACE(name_of(fault));
    write_records(&env, dir.file("a.tfrecord"), Compression::kNone, big);
    write_records(&env, dir.file("b.tfrecord"), Compression::kNone, small);
    TFRecordOptions options;
    options.env = &env;
    auto records = tfrecord_dataset({dir.file("a.tfrecord"), dir.file("b.tfrecord")}, options);
    env.inject(dir.file("a.tfrecord"), fault, detail::kReadBufferBytes + 1);
    auto log = std::make_shared<IgnoredErrors>();
    const int64_t before = fault == Fault::kVanish ? 0 : 13;
    EXPECT_EQ(count_elements(records.ignore_errors(log).iterator()), before + 3);
    EXPECT_EQ(log->count(), 1);
    EXPECT_TRUE(contains(log->first_message(), dir.file("a.tfrecord"))) << log->first_message();
  }
}

std::string idx_file(size_t values) {
  std::string out = {0, 0, 0x08, 1};
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(values >> shift));
  // Bytes that do not compress away, so that a gzip file of them spans the fault's offset.
  return out + records(1, values)[0];
}

TEST(ReaderFaultTest, IdxReaderNamesTheFilePlainOrGzip) {
  TempDir dir;
  MemoryEnv memory;
  FaultEnv env(&memory);
  const std::string bytes = idx_file(300000);
  for (bool gzip : {false, true}) {
    for (Fault fault : kFaults) {
      SCOPED_TRACE(std::string(gzip ? "gzip, " : "plain, ") + name_of(fault));
      const std::string path = dir.file(gzip ? "x.idx.gz" : "x.idx");
      env.put(path, gzip ? gzipped(bytes) : bytes);
      ASSERT_EQ(read_idx(path, &env).size(0), 300000);
      env.inject(path, fault, 1000);  // inside the data (gzip: inside the deflate stream)
      const std::string message = message_of<DataError>([&] { read_idx(path, &env); });
      EXPECT_TRUE(contains(message, path)) << message;
      EXPECT_TRUE(contains(message, reason_of(fault))) << message;
    }
  }
}

// MNIST finds its files by looking (file_exists), then reads them: a file gone in between.
TEST(ReaderFaultTest, MnistNamesAFileThatVanishedAfterItWasFound) {
  TempDir dir;
  MemoryEnv memory;
  FaultEnv env(&memory);
  std::string images = {0, 0, 0x08, 3, 0, 0, 0, 1, 0, 0, 0, 28, 0, 0, 0, 28};
  images += std::string(28 * 28, '\x10');
  env.put(dir.file("t10k-images-idx3-ubyte"), images);
  env.put(dir.file("t10k-labels-idx1-ubyte"), std::string{0, 0, 0x08, 1, 0, 0, 0, 1, 7});
  EXPECT_EQ(load_mnist_format(dir.path(), Split::kTest, &env).labels.item<int64_t>(), 7);
  env.inject(dir.file("t10k-labels-idx1-ubyte"), Fault::kVanish);
  const std::string message =
      message_of<DataError>([&] { load_mnist_format(dir.path(), Split::kTest, &env); });
  EXPECT_TRUE(contains(message, dir.file("t10k-labels-idx1-ubyte") + ": opening")) << message;
}

TEST(ReaderFaultTest, ImageFolderNamesEachFaultyImageOrSkipsIt) {
  TempDir dir;
  MemoryEnv memory;
  FaultEnv env(&memory);
  const std::string png = encode_png(torch::full({1, 4, 4}, 9, torch::kByte));
  for (const std::string name : {"cat/1.png", "cat/2.png", "dog/3.png", "dog/sub/4.png"})
    env.put(dir.file(name), png);
  ImageFolderOptions options;
  options.env = &env;
  EXPECT_EQ(image_folder_classes(dir.path(), &env), (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(image_folder_files(dir.path(), options).cardinality(), 4);
  env.inject(dir.file("cat/2.png"), Fault::kShortRead, 10);
  env.inject(dir.file("dog/3.png"), Fault::kReadError, 10);
  env.inject(dir.file("dog/sub/4.png"), Fault::kVanish);  // vanishes as it is listed
  auto files = image_folder_files(dir.path(), options);
  ASSERT_EQ(files.cardinality(), 4);
  auto it = files.iterator();
  EXPECT_EQ((*it.next())[1].item<int64_t>(), 0);  // cat/1.png is fine
  for (const auto& [name, fault] :
       std::vector<std::pair<std::string, Fault>>{{"cat/2.png", Fault::kShortRead},
                                                  {"dog/3.png", Fault::kReadError},
                                                  {"dog/sub/4.png", Fault::kVanish}}) {
    const std::string message = message_of<DataError>([&] { it.next(); });
    EXPECT_TRUE(contains(message, "image_folder: cannot read '" + dir.file(name) + "'")) << message;
    EXPECT_TRUE(contains(message, reason_of(fault))) << message;
  }
  EXPECT_FALSE(it.next().has_value());
  env.put(dir.file("dog/sub/4.png"), png);
  env.inject(dir.file("dog/sub/4.png"), Fault::kVanish);
  auto log = std::make_shared<IgnoredErrors>();
  EXPECT_EQ(count_elements(image_folder(dir.path(), {}, options).ignore_errors(log).iterator()), 1);
  EXPECT_EQ(log->count(), 3);
  // A class folder that cannot be listed is named.
  env.fail_listing(dir.file("dog"));
  const std::string listing =
      message_of<DataError>([&] { image_folder_files(dir.path(), options); });
  EXPECT_TRUE(contains(listing, "cannot list '" + dir.file("dog") + "'")) << listing;
  EXPECT_TRUE(contains(listing, "Input/output error")) << listing;
}

TEST(ReaderFaultTest, MatchFilesNamesAVanishedFileAndAnUnreadableDirectory) {
  TempDir dir;
  MemoryEnv memory;
  FaultEnv env(&memory);
  for (const std::string name : {"a-1.rec", "a-2.rec", "b.rec", ".hidden.rec", "sub/c.rec"})
    env.put(dir.file(name), "x");
  EXPECT_EQ(match_files(dir.file("a-*.rec"), &env),
            (std::vector<std::string>{dir.file("a-1.rec"), dir.file("a-2.rec")}));
  EXPECT_EQ(match_files(dir.file("*.rec"), &env).size(), 3u);  // not .hidden.rec
  EXPECT_EQ(match_files(dir.file("*/c.rec"), &env),
            (std::vector<std::string>{dir.file("sub/c.rec")}));
  EXPECT_EQ(match_files(dir.file("b.rec"), &env), (std::vector<std::string>{dir.file("b.rec")}));
  const std::string directory = message_of<DataError>([&] { match_files(dir.file("*"), &env); });
  EXPECT_TRUE(contains(directory, "'" + dir.file("sub") + "' (matched by")) << directory;
  EXPECT_TRUE(contains(directory, "a directory")) << directory;

  env.inject(dir.file("a-2.rec"), Fault::kVanish);
  const std::string vanished =
      message_of<DataError>([&] { list_files(dir.file("a-*.rec"), false, 0, &env); });
  EXPECT_TRUE(contains(vanished, "cannot read '" + dir.file("a-2.rec") + "' (matched by"))
      << vanished;
  EXPECT_TRUE(contains(vanished, "No such file or directory")) << vanished;

  env.fail_listing(dir.path());
  const std::string unreadable =
      message_of<DataError>([&] { match_files(dir.file("*.rec"), &env); });
  EXPECT_TRUE(contains(unreadable, dir.file("*.rec"))) << unreadable;
  EXPECT_TRUE(contains(unreadable, "listing directory '" + dir.path() + "'")) << unreadable;
  EXPECT_TRUE(contains(unreadable, "Input/output error")) << unreadable;
}

// On the real file system, the Env's matching finds what glob(3) finds.
TEST(ReaderFaultTest, MatchingThroughTheEnvAgreesWithGlob) {
  TempDir dir;
  for (const std::string name : {"a1.rec", "a2.rec", "b.rec", ".h.rec", "s/c.rec", "s/d.txt",
                                 "t/c.rec", "x*y", "s/.h/e.rec"}) {
    std::filesystem::create_directories(std::filesystem::path(dir.file(name)).parent_path());
    testing::write_file(dir.file(name), "x");
  }
  for (const std::string pattern : {"*.rec", "a?.rec", "[ab]*", "*/c.rec", "*/*", "s/*", "x\\*y",
                                    "b.rec", "none*", "*/.h/*", ".h*", "s/../a1.rec"}) {
    SCOPED_TRACE(pattern);
    const std::string full = dir.file(pattern);
    glob_t matches{};
    ::glob(full.c_str(), GLOB_ERR, nullptr, &matches);
    std::vector<std::string> expected(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
    globfree(&matches);
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(::dist::detail::match_paths(Env::Default(), full), expected);
  }
}

// The POSIX Env's open refuses what is not a regular file at once: a FIFO does not block.
TEST(ReaderFaultTest, ThePosixEnvRefusesAFifoWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  Env* env = Env::Default();
  const std::string message =
      message_of<DataError>([&] { env->new_random_access_file(dir.file("fifo")); });
  EXPECT_TRUE(contains(message, "opening '" + dir.file("fifo") +
                                    "' refused: it is not a regular file but a FIFO (named pipe)"))
      << message;
  EXPECT_EQ(env->file_info(dir.file("fifo")).kind, FileKind::kFifo);
  EXPECT_EQ(env->file_info(dir.path()).kind, FileKind::kDirectory);
  EXPECT_EQ(env->file_info(dir.file("none")).kind, FileKind::kMissing);
  testing::write_file(dir.file("f"), "abc");
  EXPECT_EQ(env->file_info(dir.file("f")).kind, FileKind::kRegular);
  EXPECT_EQ(env->file_info(dir.file("f")).size, 3u);
  auto stream = sequential_reader(env->new_random_access_file(dir.file("f")));
  char bytes[8];
  EXPECT_EQ(stream->read(bytes, 8), 3u);
  EXPECT_EQ(std::string(bytes, 3), "abc");
  EXPECT_EQ(stream->read(bytes, 8), 0u);
}

}  // namespace
}  // namespace dist::data
