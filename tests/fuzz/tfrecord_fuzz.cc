// Fuzzes the TFRecord reader (dist::data::detail::TFRecordFileReader, count_records): framing,
// both CRCs, and GZIP streams. The first byte picks: 0 mod 3, the rest is a plain file read as
// kNone; 1 mod 3, the rest gzip-compressed (valid streams around mutated framing) read as
// kGzip; 2 mod 3, the rest as is read as kGzip (mutated compressed bytes).
#include "data/records/tfrecord_file.h"
#include "dist/data/tfrecord.h"
#include "fuzz_util.h"

namespace {

void write_seeds(const std::string& dir) {
  // Written by the library's writer to this process's scratch file, then read back as bytes.
  const std::string path = dist::fuzz::scratch_path("tfrecord") + ".seed";
  {
    dist::data::TFRecordWriter out(path);
    out.write("");
    out.write("a record");
    out.write(std::string(300, '\x5a'));
    out.close();
  }
  std::string file;
  {
    FILE* f = std::fopen(path.c_str(), "rb");
    char buffer[4096];
    for (size_t got; (got = std::fread(buffer, 1, sizeof buffer, f)) > 0;) file.append(buffer, got);
    std::fclose(f);
    std::remove(path.c_str());
  }
  dist::fuzz::write_seed(dir, "plain", std::string(1, '\0') + file);
  dist::fuzz::write_seed(dir, "gzip_wrapped", std::string(1, '\1') + file);
  dist::fuzz::write_seed(dir, "gzip_raw", std::string(1, '\2') + dist::fuzz::gzip(file));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dist::fuzz::write_seeds_if_asked(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using dist::data::Compression;
  const int mode = data[0] % 3;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string& path = dist::fuzz::scratch_path("tfrecord");
  dist::fuzz::write_file(path, mode == 1 ? dist::fuzz::gzip(rest) : rest);
  const Compression compression = mode == 0 ? Compression::kNone : Compression::kGzip;
  dist::fuzz::expect_only_dist_errors([&] {
    dist::data::detail::TFRecordFileReader reader(path, compression);
    std::string record;
    // Alternate reading and skipping, and go on after a corrupt record's data as a pipeline
    // under ignore_errors does (bounded: every call passes a record or ends).
    for (int64_t i = 0; i < 100000; ++i) {
      try {
        if (!(i % 2 == 0 ? reader.next(&record) : reader.skip())) break;
      } catch (const dist::DataError&) {
        if (reader.failed()) break;
      }
    }
    (void)dist::data::detail::count_records(path, compression);
  });
  return 0;
}
