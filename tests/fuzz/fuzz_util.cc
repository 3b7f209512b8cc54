#include "fuzz_util.h"

#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace dist::fuzz {

const std::string& scratch_path(const char* target) {
  static const std::string path = [&] {
    // Memory-backed /dev/shm makes the write per input, and the fsyncs of the checkpoint
    // writer used to reseal inputs, cheap; a disk costs milliseconds per input.
    const char* tmp = std::getenv("TMPDIR");
    std::string dir = ::access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm"
                      : tmp != nullptr && *tmp != '\0'       ? tmp
                                                             : "/tmp";
    std::string p = dir + "/dist_fuzz_" + target + "_" + std::to_string(::getpid());
    static std::string to_remove;
    to_remove = p;
    std::atexit([] { std::remove(to_remove.c_str()); });
    return p;
  }();
  return path;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();  // not a finding in the parser, but nothing useful can be tested
  }
}

std::string gzip(const std::string& bytes) {
  z_stream z{};
  // windowBits 15 + 16: a gzip wrapper rather than zlib's.
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    std::abort();
  std::string out(deflateBound(&z, bytes.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string file_content(const uint8_t* data, size_t size) {
  if (size == 0) return {};
  const int mode = data[0] % 3;
  const char* rest = reinterpret_cast<const char*>(data + 1);
  if (mode == 0) return std::string(rest, size - 1);
  if (mode == 1) return gzip(std::string(rest, size - 1));
  if (size < 5) return gzip({});
  std::string out = gzip(std::string(rest + 4, size - 5));
  std::memcpy(out.data() + out.size() - 4, rest, 4);  // ISIZE is the last 4 bytes
  return out;
}

std::string plain_input(const std::string& content) { return '\0' + content; }
std::string gzip_input(const std::string& content) { return '\1' + content; }

void write_seeds_if_asked(const std::function<void(const std::string& dir)>& write) {
  const char* dir = std::getenv("DIST_FUZZ_WRITE_SEEDS");
  if (dir == nullptr || *dir == '\0') return;
  std::filesystem::create_directories(dir);
  write(dir);
  std::exit(0);
}

void write_seed(const std::string& dir, const std::string& name, const std::string& bytes) {
  write_file(dir + "/" + name, bytes);
}

}  // namespace dist::fuzz
