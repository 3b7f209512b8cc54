// Which memory allocator this process runs on. The project's executables link tcmalloc (CMake
// option DIST_ALLOCATOR), and so does a user's executable linked with distribute::dist or with
// `pkg-config --libs distribute`, because with the C library's malloc a training step spends
// more time in page faults than in arithmetic. dist-train reports
// the answer with its figures, so a benchmark says what it measured.
#pragma once

#include <string>

namespace dist {

// The file name of the shared object whose `malloc` the process calls, e.g.
// "libtcmalloc_minimal.so.4", or "libc.so.6" for the C library's own; "unknown" if the
// dynamic linker cannot say.
std::string malloc_library();

// A short name for it: "tcmalloc", "jemalloc", "mimalloc", "glibc", or malloc_library()
// itself for anything else.
std::string malloc_name();

}  // namespace dist
