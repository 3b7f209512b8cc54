// The one check of a path before a file is written to it (dist/core/output_file.h), the Env's
// refusal to write through anything but a regular file, appending, and the atomic writer that
// every whole file goes through. Device nodes and FIFOs are made inside a temporary folder.
#include "dist/core/output_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/atomic_file.h"
#include "dist/core/env.h"
#include "dist/core/error.h"
#include "dist/core/memory_env.h"
#include "dist/core/printable.h"
#include "test_util.h"

namespace dist {
namespace {

namespace fs = std::filesystem;
using testing::contains;

TEST(OutputFileTest, SaysWhatIsInTheWayAndAllowsOnlyWritableRegularFiles) {
  testing::TempDir dir;
  EXPECT_EQ(why_not_an_output_file(dir.file("missing")), "");
  testing::write_file(dir.file("file"), "x");
  EXPECT_EQ(why_not_an_output_file(dir.file("file")), "");
  EXPECT_EQ(why_not_an_output_file(dir.path()), "is not a regular file but a directory");
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0) << std::strerror(errno);
  EXPECT_EQ(why_not_an_output_file(dir.file("fifo")),
            "is not a regular file but a FIFO (named pipe)");
  fs::create_symlink(dir.file("fifo"), dir.file("to-fifo"));
  EXPECT_TRUE(contains(why_not_an_output_file(dir.file("to-fifo")),
                       "is a symbolic link to " + dir.file("fifo") + ", which is not a regular"))
      << why_not_an_output_file(dir.file("to-fifo"));
  fs::create_symlink(dir.file("nowhere"), dir.file("dangling"));
  EXPECT_TRUE(contains(why_not_an_output_file(dir.file("dangling")), "a symbolic link to nothing"));
  testing::write_file(dir.file("kept"), "keep me");
  fs::permissions(dir.file("kept"), fs::perms::owner_read);
  EXPECT_TRUE(contains(why_not_an_output_file(dir.file("kept")), "read-only"));
  EXPECT_TRUE(contains(why_not_an_output_file(dir.file("file") + "/below"),
                       "has a parent that is not a directory"));
  if (::mknod(dir.file("null").c_str(), S_IFCHR | 0600, ::makedev(1, 3)) == 0) {
    EXPECT_EQ(why_not_an_output_file(dir.file("null")),
              "is not a regular file but a character device");
  }
}

TEST(OutputFileTest, ALinkToARegularFileIsFollowedSoTheLinkIsKept) {
  testing::TempDir dir;
  testing::write_file(dir.file("real"), "old");
  fs::create_symlink(dir.file("real"), dir.file("link"));
  EXPECT_EQ(output_file_target(dir.file("link"), "the weights"), dir.file("real"));
  EXPECT_EQ(output_file_target(dir.file("plain"), "the weights"), dir.file("plain"));
  detail::write_file_atomically(Env::Default(), dir.file("link"), "test file",
                                [](WritableFile& f) { f.append("new", 3); });
  EXPECT_TRUE(fs::is_symlink(dir.file("link")));
  EXPECT_EQ(testing::read_file(dir.file("real")), "new");
  const std::string message = testing::message_of<InvalidArgument>(
      [&] { output_file_target(dir.path(), "--save-weights"); });
  EXPECT_TRUE(contains(message, "--save-weights '" + dir.path() + "' is not a regular file"))
      << message;
}

// The atomic writer refuses before writing anything: no temporary file is left, nothing
// replaced.
TEST(OutputFileTest, TheAtomicWriterLeavesAFifoAndAReadOnlyFileAsTheyWere) {
  testing::TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  testing::write_file(dir.file("kept"), "keep me");
  fs::permissions(dir.file("kept"), fs::perms::owner_read);
  for (const std::string& path : {dir.file("fifo"), dir.file("kept")}) {
    const std::string message = testing::message_of<InvalidArgument>([&] {
      detail::write_file_atomically(Env::Default(), path, "test file",
                                    [](WritableFile& f) { f.append("x", 1); });
    });
    EXPECT_TRUE(contains(message, path)) << message;
  }
  EXPECT_TRUE(fs::is_fifo(dir.file("fifo")));
  EXPECT_EQ(testing::read_file(dir.file("kept")), "keep me");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 2);
}

// Writing straight through the Env (event files, logs) opens without blocking and refuses what
// is not a regular file before a byte is written.
TEST(OutputFileTest, TheEnvWritesAndAppendsOnlyToRegularFiles) {
  testing::TempDir dir;
  Env* env = Env::Default();
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  for (bool append : {false, true}) {
    const std::string message = testing::message_of<DataError>([&] {
      append ? env->new_appendable_file(dir.file("fifo"))
             : env->new_writable_file(dir.file("fifo"));
    });
    EXPECT_TRUE(contains(message, dir.file("fifo"))) << message;
  }
  EXPECT_TRUE(fs::is_fifo(dir.file("fifo")));
  for (int round = 0; round < 2; ++round) {
    auto file = env->new_appendable_file(dir.file("log"));
    file->append("line\n", 5);
    file->close();
  }
  EXPECT_EQ(testing::read_file(dir.file("log")), "line\nline\n");
  MemoryEnv memory;
  for (int round = 0; round < 2; ++round) {
    auto file = memory.new_appendable_file("logs/log");
    file->append("m", 1);
    file->close();
  }
  std::string bytes(2, ' ');
  memory.new_random_access_file("logs/log")->read(0, 2, bytes.data());
  EXPECT_EQ(bytes, "mm");
}

TEST(OutputFileTest, PrintableEscapesAndBoundsWhatAFileHolds) {
  EXPECT_EQ(printable("image/encoded"), "image/encoded");
  EXPECT_EQ(printable(std::string("a\nb\x1b[2J\\", 8)), "a\\x0ab\\x1b[2J\\x5c");
  const std::string long_name(395 * 1024, '\x07');
  const std::string shown = printable(long_name, 16);
  EXPECT_EQ(shown.substr(0, 8), "\\x07\\x07");
  EXPECT_TRUE(contains(shown, "... (404480 bytes in all)")) << shown;
  EXPECT_LT(shown.size(), 100u);
}

}  // namespace
}  // namespace dist
