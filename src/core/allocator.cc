#include "dist/core/allocator.h"

#include <dlfcn.h>

namespace dist {

std::string malloc_library() {
  // The global lookup scope is what every call to malloc binds to: an allocator linked (or
  // preloaded) ahead of the C library comes first in it.
  void* symbol = dlsym(RTLD_DEFAULT, "malloc");
  Dl_info info{};
  if (symbol == nullptr || dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) {
    return "unknown";
  }
  std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string malloc_name() {
  const std::string library = malloc_library();
  for (const char* name : {"tcmalloc", "jemalloc", "mimalloc"}) {
    if (library.find(name) != std::string::npos) return name;
  }
  if (library.rfind("libc.so", 0) == 0) return "glibc";
  return library;
}

}  // namespace dist
