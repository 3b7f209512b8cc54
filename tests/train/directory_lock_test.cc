// DirectoryLock: one holder of a directory at a time, named in the refusal, released when the
// holder goes. (That a killed process leaves no stale lock is shown with real processes in
// tests/tools/dist_train_hostile_test.cc.)
#include "dist/train/directory_lock.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include "dist/core/error.h"
#include "test_util.h"

namespace dist {
namespace {

TEST(DirectoryLockTest, OneHolderAtATimeNamedInTheRefusal) {
  testing::TempDir dir;
  const std::string outputs = dir.file("new/ckpts");  // made if missing
  std::optional<DirectoryLock> held;
  held.emplace(outputs, "checkpoints");
  EXPECT_TRUE(std::filesystem::is_directory(outputs));
  EXPECT_EQ(held->path(), outputs + "/.dist-lock");
  try {
    DirectoryLock second(outputs, "checkpoints");
    FAIL() << "a second lock of one directory was granted";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("is in use by another job"), std::string::npos) << message;
    EXPECT_NE(message.find("pid " + std::to_string(::getpid())), std::string::npos) << message;
    EXPECT_NE(message.find("give this one its own directory"), std::string::npos) << message;
  }
  DirectoryLock moved = std::move(*held);  // the hold moves with the object
  held.reset();
  EXPECT_THROW(DirectoryLock(outputs, "checkpoints"), InvalidArgument);
  { DirectoryLock released = std::move(moved); }
  EXPECT_NO_THROW(DirectoryLock(outputs, "checkpoints"));
}

TEST(DirectoryLockTest, AFileWhereTheDirectoryShouldBeIsADataError) {
  testing::TempDir dir;
  testing::write_file(dir.file("a_file"), "x");
  EXPECT_THROW(DirectoryLock(dir.file("a_file"), "checkpoints"), DataError);
}

}  // namespace
}  // namespace dist
