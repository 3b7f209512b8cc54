// MemoryEnv (dist/core/memory_env.h): files in memory behind the Env interface, as a checkpoint
// uses them (write, rename, list, read back) and as errors name them.
#include <gtest/gtest.h>

#include <algorithm>

#include "dist/core/error.h"
#include "dist/core/memory_env.h"
#include "dist/train/checkpoint.h"

namespace dist {
namespace {

void write(Env& env, const std::string& path, const std::string& text) {
  auto file = env.new_writable_file(path);
  file->append(text.data(), text.size());
  file->close();
}

std::string read(Env& env, const std::string& path) {
  auto file = env.new_random_access_file(path);
  std::string text(file->size(), '\0');
  file->read(0, text.size(), text.data());
  return text;
}

TEST(MemoryEnvTest, WritesRenamesListsAndRemovesFiles) {
  MemoryEnv env;
  env.create_dirs("/a/b");
  write(env, "/a/b/x.tmp", "hello");
  env.rename_file("/a/b/x.tmp", "/a/b/x");
  EXPECT_FALSE(env.file_exists("/a/b/x.tmp"));
  EXPECT_EQ(read(env, "/a/b/x"), "hello");
  write(env, "/a/c/y", "!");  // parents appear with the file
  auto children = env.get_children("/a");
  std::sort(children.begin(), children.end());
  EXPECT_EQ(children, (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(env.get_children("/a/b"), std::vector<std::string>{"x"});
  EXPECT_EQ(env.bytes(), 6);
  env.remove_file("/a/b/x");
  EXPECT_FALSE(env.file_exists("/a/b/x"));
  EXPECT_TRUE(env.file_exists("/a/b"));
}

TEST(MemoryEnvTest, AReaderKeepsTheFileAsItWasWhenOpened) {
  MemoryEnv env;
  write(env, "f", "first");
  auto reader = env.new_random_access_file("f");
  write(env, "f", "second, longer");
  std::string text(reader->size(), '\0');
  reader->read(0, text.size(), text.data());
  EXPECT_EQ(text, "first");
  EXPECT_THROW(reader->read(3, 5, text.data()), DataError);  // past its end
}

TEST(MemoryEnvTest, ErrorsNameThePath) {
  MemoryEnv env;
  try {
    env.new_random_access_file("/nowhere/f");
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("'/nowhere/f'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(env.remove_file("/nowhere/f"), DataError);
  EXPECT_THROW(env.get_children("/nowhere"), DataError);
  EXPECT_THROW(env.rename_file("/nowhere/f", "/g"), DataError);
  env.create_dirs("/d");
  EXPECT_THROW(env.new_writable_file("/d"), DataError);
}

TEST(MemoryEnvTest, HoldsACheckpointThatReadsBackExactly) {
  torch::manual_seed(1);
  auto model = std::make_shared<torch::nn::LinearImpl>(4, 3);
  Checkpoint saved(model, nullptr);
  saved.state.step = 17;
  MemoryEnv env;
  saved.write("/committed/step-17.safetensors", &env);
  auto other = std::make_shared<torch::nn::LinearImpl>(4, 3);
  Checkpoint restored(other, nullptr);
  restored.read("/committed/step-17.safetensors", &env);
  EXPECT_EQ(restored.state.step, 17);
  EXPECT_TRUE(torch::equal(other->weight, model->weight));
  EXPECT_TRUE(torch::equal(other->bias, model->bias));
}

}  // namespace
}  // namespace dist
