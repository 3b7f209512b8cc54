// Fuzzes dist::data::read_cifar10_batches on one batch file, plain and gzip (see file_content),
// and on the same file twice (the concatenation path).
#include <ATen/ATen.h>

#include "dist/data/cifar10.h"
#include "fuzz_util.h"

namespace {

std::string records(int count) {
  std::string out;
  for (int r = 0; r < count; ++r) {
    out += static_cast<char>(r % 10);  // label
    for (int64_t i = 0; i < 3 * 32 * 32; ++i) out += static_cast<char>((i * 31 + r) & 0xff);
  }
  return out;
}

void write_seeds(const std::string& dir) {
  using dist::fuzz::gzip;
  using dist::fuzz::write_seed;
  write_seed(dir, "one_record", dist::fuzz::plain_input(records(1)));
  write_seed(dir, "two_records", dist::fuzz::plain_input(records(2)));
  write_seed(dir, "two_records_gzip_wrapped", dist::fuzz::gzip_input(records(2)));
  write_seed(dir, "one_record_gzip_raw", dist::fuzz::plain_input(gzip(records(1))));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dist::fuzz::write_seeds_if_asked(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = dist::fuzz::scratch_path("cifar10");
  dist::fuzz::write_file(path, dist::fuzz::file_content(data, size));
  dist::fuzz::expect_only_dist_errors([&] {
    // The last bit of the mode byte reads the file as two batches.
    const bool twice = size > 0 && data[0] >= 128;
    auto out = dist::data::read_cifar10_batches(twice ? std::vector<std::string>{path, path}
                                                      : std::vector<std::string>{path});
    if (out.labels.size(0) != out.images.size(0)) std::abort();
    (void)out.images.sum().item<double>();
  });
  return 0;
}
