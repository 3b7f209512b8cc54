// Writes a small synthetic data set in CIFAR-10's binary format, for running cifar10_resnet
// without the real data (the examples' ctest tests do).
//
//   make_cifar10_sample <out-dir> [records-per-train-batch] [test-records]
//
// Writes data_batch_1.bin .. data_batch_5.bin (default 60 records each) and test_batch.bin
// (default 100 records), the names dist::data::load_cifar10 reads. A record is one label byte
// then 32x32 red, green and blue planes, row-major. Each class has its own colour and stripe
// orientation under uniform noise, so a network can learn it; the same arguments always give
// the same bytes.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

constexpr int kSide = 32;
constexpr int kClasses = 10;

// A small deterministic generator (64-bit LCG), so the files do not depend on the platform's
// std::rand or <random> distributions.
class Lcg {
 public:
  explicit Lcg(uint64_t seed) : state_(seed) {}
  uint32_t next() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(state_ >> 33);
  }

 private:
  uint64_t state_;
};

void append_record(std::vector<uint8_t>& out, int label, Lcg& rng) {
  out.push_back(static_cast<uint8_t>(label));
  for (int channel = 0; channel < 3; ++channel) {
    // Bit `channel` of the label picks a bright or dark plane: 8 colours for 10 classes ...
    const int base = (label >> channel) & 1 ? 170 : 60;
    for (int row = 0; row < kSide; ++row) {
      for (int col = 0; col < kSide; ++col) {
        // ... and stripes (horizontal for labels < 5, vertical otherwise) tell the rest apart.
        const int position = label < kClasses / 2 ? row : col;
        const int stripe = (position / 4) % 2 == 0 ? 30 : -30;
        const int noise = static_cast<int>(rng.next() % 41) - 20;
        int value = base + stripe + noise;
        value = value < 0 ? 0 : value > 255 ? 255 : value;
        out.push_back(static_cast<uint8_t>(value));
      }
    }
  }
}

bool write_batch(const std::filesystem::path& path, int records, Lcg& rng) {
  std::vector<uint8_t> bytes;
  bytes.reserve(static_cast<size_t>(records) * (1 + 3 * kSide * kSide));
  for (int i = 0; i < records; ++i)
    append_record(bytes, static_cast<int>(rng.next() % kClasses), rng);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::cerr << "error: cannot write " << path.string() << "\n";
    return false;
  }
  return true;
}

// A positive count from argv, or -1.
int parse_count(const char* text) {
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  return end != text && *end == '\0' && value >= 1 && value <= 100000 ? static_cast<int>(value)
                                                                      : -1;
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "usage: make_cifar10_sample <out-dir> [records-per-train-batch] [test-records]";
  if (argc >= 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << usage << "\n";
    return 0;
  }
  if (argc < 2 || argc > 4 || argv[1][0] == '-') {  // an option is not a directory name
    std::cerr << usage << "\n";
    return 2;
  }
  const int train_records = argc > 2 ? parse_count(argv[2]) : 60;
  const int test_records = argc > 3 ? parse_count(argv[3]) : 100;
  if (train_records < 0 || test_records < 0) {
    std::cerr << "error: record counts must be integers from 1 to 100000\n" << usage << "\n";
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    std::cerr << "error: cannot create " << dir.string() << ": " << error.message() << "\n";
    return 1;
  }
  Lcg rng(/*seed=*/2024);
  for (int i = 1; i <= 5; ++i)
    if (!write_batch(dir / ("data_batch_" + std::to_string(i) + ".bin"), train_records, rng))
      return 1;
  if (!write_batch(dir / "test_batch.bin", test_records, rng)) return 1;
  std::cout << "wrote " << 5 * train_records << " training and " << test_records
            << " test records to " << dir.string() << "\n";
  return 0;
}
