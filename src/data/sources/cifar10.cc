#include "dist/data/cifar10.h"

#include <ATen/ATen.h>

#include <filesystem>

#include "data/sources/file_bytes.h"
#include "dist/core/error.h"

namespace dist::data {
namespace {

constexpr int64_t kCifarClasses = 10;
constexpr int64_t kSide = 32;
constexpr const char* kArchiveHint =
    "the binary version is cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html";

// The records of one batch file as uint8 [n, kCifar10RecordBytes].
at::Tensor read_records(const std::string& path, Env* env) {
  detail::FileBytes in(path, env);
  const uint64_t size = in.size();
  const uint64_t record = kCifar10RecordBytes;
  DIST_CHECK(size > 0 && size % record == 0, DataError, path, " holds ", size, " bytes",
             in.gzipped() ? " (uncompressed, per its gzip trailer)" : "",
             ", not a positive multiple of the ", record, "-byte record: it is truncated or not ",
             "a CIFAR-10 binary batch (", kArchiveHint, ")");
  in.check_size(size, ::dist::detail::concat("it should hold ", size / record, " records"));
  const int64_t count = static_cast<int64_t>(size / record);
  at::Tensor records = at::empty({count, kCifar10RecordBytes}, at::kByte);
  in.read_exact(records.data_ptr(), size, "CIFAR-10 records");
  in.expect_end();

  at::Tensor labels = records.select(1, 0);
  if (labels.max().item<int64_t>() >= kCifarClasses) {
    int64_t index = labels.ge(kCifarClasses).nonzero()[0][0].item<int64_t>();
    throw DataError(::dist::detail::concat(path, " holds label ", labels[index].item<int64_t>(),
                                           " in record ", index, "; labels must be 0 to ",
                                           kCifarClasses - 1, ": the file is corrupt or not a ",
                                           "CIFAR-10 binary batch"));
  }
  return records;
}

std::vector<std::string> batch_names(Split split) {
  if (split == Split::kTest) return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  return names;
}

}  // namespace

ImageLabelTensors read_cifar10_batches(const std::vector<std::string>& paths, Env* env) {
  DIST_CHECK_ARG(!paths.empty(), "read_cifar10_batches needs at least one batch file");
  std::vector<at::Tensor> parts;
  parts.reserve(paths.size());
  for (const auto& path : paths) parts.push_back(read_records(path, env));
  at::Tensor records = parts.size() == 1 ? parts[0] : at::cat(parts);
  parts.clear();  // release the per-file buffers before converting
  const int64_t n = records.size(0);
  at::Tensor images = records.slice(1, 1).reshape({n, 3, kSide, kSide}).to(at::kFloat).div_(255.0);
  return {images, records.select(1, 0).to(at::kLong)};
}

ImageLabelTensors load_cifar10(const std::string& dir, Split split, Env* env) {
  namespace fs = std::filesystem;  // paths joined here; the file system is env's
  auto is_directory = [env](const fs::path& p) {
    return env->file_info(p.string()).kind == FileKind::kDirectory;
  };
  DIST_CHECK(is_directory(dir), DataError, "CIFAR-10 directory ", dir, " does not exist; ",
             kArchiveHint);
  fs::path root(dir);
  if (is_directory(root / "cifar-10-batches-bin")) root /= "cifar-10-batches-bin";
  std::vector<std::string> paths;
  for (const auto& name : batch_names(split)) {
    fs::path path = root / name;
    DIST_CHECK(env->file_exists(path.string()), DataError, "CIFAR-10 batch ", path.string(),
               " does not exist; ", kArchiveHint, ", unpacked into ", dir);
    paths.push_back(path.string());
  }
  return read_cifar10_batches(paths, env);
}

Dataset cifar10(const std::string& dir, Split split, Env* env) {
  ImageLabelTensors data = load_cifar10(dir, split, env);
  return Dataset::from_tensor_slices({data.images, data.labels});
}

}  // namespace dist::data
