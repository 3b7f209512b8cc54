// Helpers shared by the fuzz targets: a scratch file (the readers take paths), gzip wrapping,
// seed writing, and the rule for what counts as a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <typeinfo>

#include "dist/core/error.h"

namespace dist::fuzz {

// A file of this process's own in /dev/shm (else TMPDIR or /tmp), named after the target and
// the pid so that parallel fuzzers never share one; removed at exit.
const std::string& scratch_path(const char* target);

void write_file(const std::string& path, const std::string& bytes);

// `bytes` as a complete gzip stream (header, deflate data, CRC-32 and size trailer).
std::string gzip(const std::string& bytes);

// How the readers that accept gzip (IDX, CIFAR-10) see an input. The first byte picks:
//   0 mod 3: the rest as is (plain files, and corrupt gzip streams from the seeds);
//   1 mod 3: the rest gzip-compressed, so the parser behind the decompressor gets valid streams
//            the mutator could hardly produce by flipping compressed bits;
//   2 mod 3: like 1, but the next 4 bytes replace the trailer's size field (ISIZE), which the
//            reader trusts to bound allocations before it has decompressed anything.
std::string file_content(const uint8_t* data, size_t size);
// The input whose file_content is `content` in mode 0 and 1 (for seeds).
std::string plain_input(const std::string& content);
std::string gzip_input(const std::string& content);

// With DIST_FUZZ_WRITE_SEEDS=<dir> in the environment, calls write(dir) and exits: each target
// knows its own seed format, and seeds such as a checkpoint are best written by the library.
void write_seeds_if_asked(const std::function<void(const std::string& dir)>& write);
void write_seed(const std::string& dir, const std::string& name, const std::string& bytes);

// Runs `parse`. DataError and InvalidArgument (the documented answers to a bad input) and
// dist::Error (a failing file system) are expected; InternalError or any other exception is a
// finding: it is printed and the process aborts, so libFuzzer saves the input.
template <class F>
void expect_only_dist_errors(F&& parse) {
  try {
    parse();
  } catch (const InternalError& e) {
    std::fprintf(stderr, "FINDING: InternalError: %s\n", e.what());
    std::abort();
  } catch (const Error& e) {
    // The parser rejected the input, as documented. DIST_FUZZ_VERBOSE=1 says why, to check
    // that the seeds get past the first checks.
    static const bool verbose = std::getenv("DIST_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "rejected: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FINDING: exception %s escaped the parser: %s\n", typeid(e).name(),
                 e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "FINDING: a non-std exception escaped the parser\n");
    std::abort();
  }
}

}  // namespace dist::fuzz
