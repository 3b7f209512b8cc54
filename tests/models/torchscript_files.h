// Where the TorchScript test modules are: DIST_TORCHSCRIPT_TEST_DIR, which tests/CMakeLists.txt
// defines for the sources that read them (examples/python/make_torchscript_models.py writes it).
#pragma once

#include <string>

namespace dist::testing {

inline std::string model_file(const std::string& name) {
  return std::string(DIST_TORCHSCRIPT_TEST_DIR) + "/" + name;
}

}  // namespace dist::testing
