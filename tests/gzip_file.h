// Gzip files written by the tests of the readers that inflate them (MNIST, IDX).
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

namespace dist::testing {

// Writes `data` gzip-compressed to `path` (empty data: a gzip stream of nothing); a fatal
// failure of the calling test when zlib cannot.
inline void write_gzip(const std::string& path, const std::string& data) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr) << path;
  if (!data.empty()) {
    ASSERT_EQ(gzwrite(gz, data.data(), static_cast<unsigned>(data.size())),
              static_cast<int>(data.size()));
  }
  ASSERT_EQ(gzclose(gz), Z_OK);
}

}  // namespace dist::testing
