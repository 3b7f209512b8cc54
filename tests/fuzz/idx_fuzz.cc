// Fuzzes dist::data::read_idx, plain and gzip (see file_content for how the first byte picks).
#include <ATen/ATen.h>

#include "dist/data/idx_reader.h"
#include "fuzz_util.h"

namespace {

// A big-endian IDX file: magic (type code, rank), dims, then `values` bytes as they are.
std::string idx(uint8_t type, const std::vector<uint32_t>& dims, const std::string& values) {
  std::string out{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>(d >> shift);
  return out + values;
}

void write_seeds(const std::string& dir) {
  using dist::fuzz::gzip;
  using dist::fuzz::gzip_input;
  using dist::fuzz::plain_input;
  using dist::fuzz::write_seed;
  std::string pixels;
  for (int i = 0; i < 2 * 4 * 4; ++i) pixels += static_cast<char>(i * 7);
  const std::string images = idx(0x08, {2, 4, 4}, pixels);
  const std::string labels = idx(0x08, {2}, std::string{'\3', '\7'});
  const std::string floats = idx(0x0D, {3}, std::string(12, '\x40'));
  const std::string doubles = idx(0x0E, {1, 2}, std::string(16, '\x3f'));
  const std::string shorts = idx(0x0B, {2, 2}, std::string(8, '\x01'));
  write_seed(dir, "images", plain_input(images));
  write_seed(dir, "labels", plain_input(labels));
  write_seed(dir, "float32", plain_input(floats));
  write_seed(dir, "float64", plain_input(doubles));
  write_seed(dir, "int16", plain_input(shorts));
  write_seed(dir, "empty_dim", plain_input(idx(0x0C, {0, 5}, "")));
  write_seed(dir, "images_gzip_wrapped", gzip_input(images));
  write_seed(dir, "labels_gzip_wrapped", gzip_input(labels));
  write_seed(dir, "images_gzip_raw", plain_input(gzip(images)));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dist::fuzz::write_seeds_if_asked(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = dist::fuzz::scratch_path("idx");
  dist::fuzz::write_file(path, dist::fuzz::file_content(data, size));
  dist::fuzz::expect_only_dist_errors([&] {
    at::Tensor t = dist::data::read_idx(path);
    // Touch every value, so ASan sees a tensor smaller than its claimed shape.
    if (t.numel() > 0) (void)t.to(at::kDouble).sum().item<double>();
  });
  return 0;
}
