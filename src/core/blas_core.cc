#include "dist/core/blas_core.h"

#include <dlfcn.h>
#include <strings.h>

#include <cstdlib>
#include <initializer_list>
#include <mutex>

namespace dist {
namespace {

constexpr const char* kVariable = "OPENBLAS_CORETYPE";

// Whether a core's kernels use AVX2 or wider vectors (OpenBLAS's names, compared without case,
// as OpenBLAS does); its fallback for a CPU it does not know is older.
bool avx2_or_wider(const std::string& core) {
  for (const char* name : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"})
    if (strcasecmp(core.c_str(), name) == 0) return true;
  return false;
}

// OpenBLAS's own start and stop of its kernel choice (exported by its builds for every CPU,
// DYNAMIC_ARCH, as Debian's are): the start reads OPENBLAS_CORETYPE as at load time and runs
// the core's set-up. Looked up, not linked: the BLAS LibTorch loads may be another one.
template <typename Function>
Function openblas_function(const char* name) {
  return reinterpret_cast<Function>(dlsym(RTLD_DEFAULT, name));
}

OpenBlasCoreChoice switch_if_below_this_cpu() {
  const std::string running = running_openblas_core();
  OpenBlasCoreChoice choice{running, running};
  const char* chosen = std::getenv(kVariable);
  if (running.empty() || (chosen != nullptr && *chosen != '\0')) return choice;
  // Only a fallback below AVX2 is a CPU OpenBLAS did not know: one it knows may get narrower
  // kernels than its features on purpose (OpenBLAS 0.3.21 may give AMD's AVX-512 Zen 4 its
  // AVX2 "Zen" kernels), and that choice stands.
  const char* best = openblas_core_for_this_cpu();
  if (best == nullptr || avx2_or_wider(running)) return choice;
  const auto stop = openblas_function<void (*)()>("gotoblas_dynamic_quit");
  const auto start = openblas_function<void (*)()>("gotoblas_dynamic_init");
  if (stop == nullptr || start == nullptr) return choice;  // a build for one CPU only
  if (setenv(kVariable, best, 1) != 0) return choice;
  stop();
  start();
  choice.now = running_openblas_core();
  return choice;
}

}  // namespace

const char* openblas_core_for_this_cpu() {
  __builtin_cpu_init();  // libgcc's cpuid reading, which also checks that the OS saves AVX state
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  if (avx512) return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return __builtin_cpu_is("amd") ? "Zen" : "Haswell";
  return nullptr;
}

std::string running_openblas_core() {
  const auto name = openblas_function<char* (*)()>("openblas_get_corename");
  const char* core = name != nullptr ? name() : nullptr;
  return core != nullptr ? core : "";
}

OpenBlasCoreChoice choose_openblas_core() {
  static std::once_flag once;
  static OpenBlasCoreChoice choice;
  std::call_once(once, [] { choice = switch_if_below_this_cpu(); });
  return choice;
}

}  // namespace dist
