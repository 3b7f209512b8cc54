#include "dist/core/allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

// The test binary links dist_allocator like every executable of the project, so the malloc it
// runs on must be the one CMake was configured with (DIST_ALLOCATOR), not the C library's.
TEST(AllocatorTest, ExecutablesRunOnTheConfiguredAllocator) {
  const std::string configured = DIST_ALLOCATOR_EXPECTED;
  const std::string expected = configured == "system" ? "glibc" : configured;
  if (std::getenv("LD_PRELOAD") != nullptr) GTEST_SKIP() << "LD_PRELOAD replaces the allocator";
  EXPECT_EQ(dist::malloc_name(), expected) << "malloc comes from " << dist::malloc_library();
}

TEST(AllocatorTest, NamesTheLibraryFile) {
  const std::string library = dist::malloc_library();
  EXPECT_NE(library, "unknown");
  EXPECT_EQ(library.find('/'), std::string::npos) << library;
  EXPECT_NE(library.find(".so"), std::string::npos) << library;
}

}  // namespace
