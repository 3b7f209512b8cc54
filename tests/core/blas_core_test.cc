#include "dist/core/blas_core.h"

#include <gtest/gtest.h>
#include <strings.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace {

// The first "flags" and "vendor_id" lines of /proc/cpuinfo: what the kernel says the CPU has,
// read apart from the cpuid code under test.
struct CpuInfo {
  std::set<std::string> flags;
  std::string vendor;
};

CpuInfo read_cpuinfo() {
  std::ifstream file("/proc/cpuinfo");
  CpuInfo info;
  std::string line;
  while (std::getline(file, line) && (info.flags.empty() || info.vendor.empty())) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_first_of(" \t"));
    std::istringstream values(line.substr(colon + 1));
    if (key == "flags" && info.flags.empty()) {
      for (std::string flag; values >> flag;) info.flags.insert(flag);
    } else if (key == "vendor_id" && info.vendor.empty()) {
      values >> info.vendor;
    }
  }
  return info;
}

TEST(BlasCoreTest, TheCoreForThisCpuFollowsTheFeaturesTheKernelLists) {
  const CpuInfo cpu = read_cpuinfo();
  ASSERT_FALSE(cpu.flags.empty()) << "/proc/cpuinfo lists no flags";
  const auto has = [&cpu](const char* flag) { return cpu.flags.count(flag) > 0; };
  const char* expected = nullptr;
  if (has("avx512f") && has("avx512cd") && has("avx512bw") && has("avx512dq") && has("avx512vl"))
    expected = has("avx512_bf16") ? "Cooperlake" : "SkylakeX";
  else if (has("avx2") && has("fma"))
    expected = cpu.vendor == "AuthenticAMD" ? "Zen" : "Haswell";
  const char* chosen = dist::openblas_core_for_this_cpu();
  if (expected == nullptr) {
    EXPECT_EQ(chosen, nullptr) << chosen;
  } else {
    ASSERT_NE(chosen, nullptr) << "expected " << expected;
    EXPECT_STREQ(chosen, expected);
  }
}

// tests/test_main.cc chose at the start of main, as dist-train does: OpenBLAS now runs the
// chosen core, or the one it picked itself when that was no narrower (or the environment's).
TEST(BlasCoreTest, OpenBlasRunsWhatTheChoiceSaysAndItsProductsAreRight) {
  const dist::OpenBlasCoreChoice choice = dist::choose_openblas_core();
  if (choice.was.empty()) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  EXPECT_EQ(choice.now, dist::running_openblas_core());
  if (choice.was != choice.now) {
    const char* best = dist::openblas_core_for_this_cpu();
    ASSERT_NE(best, nullptr);
    EXPECT_EQ(strcasecmp(choice.now.c_str(), best), 0) << choice.now << " against " << best;
    const char* variable = std::getenv("OPENBLAS_CORETYPE");
    ASSERT_NE(variable, nullptr) << "the processes started from here would start on " << choice.was;
    EXPECT_STREQ(variable, best);
  }
  // The kernels multiply right: float32 against the same product in float64.
  torch::manual_seed(3);
  const at::Tensor a = torch::randn({300, 257}), b = torch::randn({257, 129});
  const at::Tensor exact = torch::mm(a.to(torch::kDouble), b.to(torch::kDouble));
  EXPECT_TRUE(torch::allclose(torch::mm(a, b).to(torch::kDouble), exact, 1e-4, 1e-4));
}

}  // namespace
