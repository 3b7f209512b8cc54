// Env::Default(), the POSIX file system: each operation in a temporary directory, and errors
// that name the path and the system's reason.
#include "dist/core/env.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "dist/core/error.h"
#include "test_util.h"

namespace dist {
namespace {

std::vector<std::string> sorted_children(Env* env, const std::string& dir) {
  auto names = env->get_children(dir);
  std::sort(names.begin(), names.end());
  return names;
}

void expect_data_error(const std::function<void()>& call, const std::string& path,
                       const std::string& reason) {
  try {
    call();
    ADD_FAILURE() << "expected a DataError naming " << path;
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + path + "'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

TEST(EnvTest, DefaultIsOneProcessWideInstance) {
  EXPECT_NE(Env::Default(), nullptr);
  EXPECT_EQ(Env::Default(), Env::Default());
}

TEST(EnvTest, WritesSyncsRenamesListsAndRemoves) {
  testing::TempDir dir;
  Env* env = Env::Default();
  const std::string sub = dir.file("a/b");
  env->create_dirs(sub);
  env->create_dirs(sub);  // exists: nothing to do
  EXPECT_TRUE(env->file_exists(sub));

  auto file = env->new_writable_file(sub + "/x.tmp");
  file->append("hello ", 6);
  file->append("world", 5);
  file->append("", 0);
  file->flush();
  EXPECT_EQ(testing::read_file(sub + "/x.tmp"), "hello world");  // visible before sync
  file->sync();
  file->close();
  env->rename_file(sub + "/x.tmp", sub + "/x");
  env->sync_dir(sub);
  EXPECT_FALSE(env->file_exists(sub + "/x.tmp"));
  EXPECT_EQ(testing::read_file(sub + "/x"), "hello world");

  auto reader = env->new_random_access_file(sub + "/x");
  EXPECT_EQ(reader->size(), 11u);
  std::string word(5, '\0');
  reader->read(6, 5, word.data());
  EXPECT_EQ(word, "world");
  reader->read(11, 0, word.data());  // nothing, at the end
  expect_data_error([&] { reader->read(8, 4, word.data()); }, sub + "/x", "unexpected end of file");

  // A new writable file truncates; rename replaces.
  auto again = env->new_writable_file(sub + "/y");
  again->append("y", 1);
  again->close();
  env->rename_file(sub + "/y", sub + "/x");
  EXPECT_EQ(testing::read_file(sub + "/x"), "y");
  auto truncated = env->new_writable_file(sub + "/x");
  truncated->close();
  EXPECT_EQ(testing::read_file(sub + "/x"), "");

  env->create_dirs(sub + "/c");
  EXPECT_EQ(sorted_children(env, sub), (std::vector<std::string>{"c", "x"}));
  env->remove_file(sub + "/x");
  EXPECT_FALSE(env->file_exists(sub + "/x"));
  EXPECT_EQ(sorted_children(env, sub), std::vector<std::string>{"c"});
  EXPECT_TRUE(env->get_children(sub + "/c").empty());
}

TEST(EnvTest, ErrorsNameThePathAndTheReason) {
  testing::TempDir dir;
  Env* env = Env::Default();
  const std::string missing = dir.file("no/such");
  expect_data_error([&] { env->new_writable_file(missing + "/f"); }, missing + "/f",
                    "No such file or directory");
  expect_data_error([&] { env->new_random_access_file(missing); }, missing,
                    "No such file or directory");
  expect_data_error([&] { env->get_children(missing); }, missing, "No such file or directory");
  expect_data_error([&] { env->remove_file(missing); }, missing, "No such file or directory");
  expect_data_error([&] { env->rename_file(missing, dir.file("to")); }, missing,
                    "No such file or directory");
  expect_data_error([&] { env->sync_dir(missing); }, missing, "No such file or directory");
  EXPECT_FALSE(env->file_exists(missing));

  testing::write_file(dir.file("file"), "x");
  expect_data_error([&] { env->create_dirs(dir.file("file")); }, dir.file("file"), "failed");
  expect_data_error([&] { env->create_dirs(dir.file("file/sub")); }, dir.file("file/sub"),
                    "failed");
  expect_data_error([&] { env->get_children(dir.file("file")); }, dir.file("file"),
                    "Not a directory");
  env->create_dirs(dir.file("d"));
  expect_data_error([&] { env->remove_file(dir.file("d")); }, dir.file("d"), "failed");
  expect_data_error([&] { env->rename_file(dir.file("file"), dir.file("d")); }, dir.file("d"),
                    "Is a directory");
}

}  // namespace
}  // namespace dist
