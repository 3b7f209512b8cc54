// match_files and list_files: the file names of a pipeline.
#include <algorithm>
#include <cstring>

#include "core/path_match.h"
#include "data/dataset_node.h"
#include "data/epoch_random.h"
#include "dist/core/error.h"
#include "dist/data/files.h"

namespace dist::data {
namespace {

void append_matches(const std::string& pattern, Env* env, std::vector<std::string>& out) {
  DIST_CHECK_ARG(!pattern.empty(), "match_files: the file pattern is empty");
  std::vector<std::string> found = ::dist::detail::match_paths(env, pattern);
  DIST_CHECK(!found.empty(), DataError, "no file matches '", pattern,
             "': check the path and the pattern (*, ? and [...] as in a shell)");
  for (auto& path : found) {
    FileInfo info;
    try {
      info = env->file_info(path);
    } catch (const DataError& e) {
      throw DataError(::dist::detail::concat("cannot read '", path, "' (matched by '", pattern,
                                             "'): ", e.what()));
    }
    // Missing: it vanished since the listing (or is a link to nothing).
    DIST_CHECK(info.kind != FileKind::kMissing, DataError, "cannot read '", path, "' (matched by '",
               pattern, "'): No such file or directory");
    DIST_CHECK(info.kind == FileKind::kRegular, DataError, "'", path, "' (matched by '", pattern,
               "') is ", file_kind_phrase(info.kind),
               ", not a data file: narrow the pattern to the files");
    out.push_back(std::move(path));
  }
}

class ListFilesIterator : public detail::IteratorNode {
 public:
  ListFilesIterator(std::shared_ptr<const std::vector<std::string>> files,
                    std::vector<size_t> order)
      : files_(std::move(files)), order_(std::move(order)) {}
  std::optional<Element> next() override {
    if (index_ >= order_.size()) return std::nullopt;
    return Element{string_tensor((*files_)[order_[index_++]])};
  }
  int64_t skip(int64_t n) override {
    const int64_t skipped = std::min<int64_t>(n, static_cast<int64_t>(order_.size() - index_));
    index_ += static_cast<size_t>(skipped);
    return skipped;
  }

 private:
  std::shared_ptr<const std::vector<std::string>> files_;
  std::vector<size_t> order_;
  size_t index_ = 0;
};

class ListFilesNode : public detail::FileSourceNode {
 public:
  ListFilesNode(std::vector<std::string> files, bool shuffle, uint64_t seed)
      : files_(std::make_shared<const std::vector<std::string>>(std::move(files))),
        shuffle_(shuffle),
        seed_(seed) {}
  std::unique_ptr<detail::IteratorNode> make_iterator(int64_t epoch) const override {
    std::vector<size_t> order(files_->size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (shuffle_) {
      auto rng = detail::epoch_stream(seed_, static_cast<uint64_t>(epoch));
      order = detail::permutation(files_->size(), rng);
    }
    return std::make_unique<ListFilesIterator>(files_, std::move(order));
  }
  int64_t cardinality() const override { return static_cast<int64_t>(files_->size()); }
  std::string describe() const override {
    return "list_files(" + std::to_string(files_->size()) + " files" +
           (shuffle_ ? ", shuffled" : "") + ")";
  }
  const std::vector<std::string>& files() const override { return *files_; }
  detail::NodePtr with_files(std::vector<std::string> files) const override {
    return std::make_shared<ListFilesNode>(std::move(files), shuffle_, seed_);
  }

 private:
  std::shared_ptr<const std::vector<std::string>> files_;
  bool shuffle_;
  uint64_t seed_;
};

}  // namespace

std::vector<std::string> match_files(const std::string& pattern, Env* env) {
  return match_files(std::vector<std::string>{pattern}, env);
}

std::vector<std::string> match_files(const std::vector<std::string>& patterns, Env* env) {
  DIST_CHECK_ARG(!patterns.empty(), "match_files needs at least one pattern");
  DIST_CHECK_ARG(env != nullptr, "match_files: the Env is null");
  std::vector<std::string> files;
  for (const auto& pattern : patterns) append_matches(pattern, env, files);
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

Dataset list_files(const std::string& pattern, bool shuffle, uint64_t seed, Env* env) {
  return list_files(std::vector<std::string>{pattern}, shuffle, seed, env);
}

Dataset list_files(const std::vector<std::string>& patterns, bool shuffle, uint64_t seed,
                   Env* env) {
  return Dataset(std::make_shared<ListFilesNode>(match_files(patterns, env), shuffle, seed));
}

at::Tensor string_tensor(std::string_view text) {
  at::Tensor bytes = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  if (!text.empty()) std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), text.size());
  return bytes;
}

std::string string_of(const at::Tensor& bytes) {
  DIST_CHECK_ARG(bytes.defined() && bytes.scalar_type() == at::kByte,
                 "string_of needs a uint8 tensor of bytes, got ",
                 bytes.defined() ? c10::toString(bytes.scalar_type()) : "an undefined tensor");
  const at::Tensor dense = bytes.to(at::kCPU).contiguous();
  return std::string(reinterpret_cast<const char*>(dense.data_ptr<uint8_t>()),
                     static_cast<size_t>(dense.numel()));
}

std::string_view bytes_view(const at::Tensor& bytes) {
  DIST_CHECK_ARG(bytes.defined() && bytes.scalar_type() == at::kByte && bytes.dim() == 1 &&
                     bytes.is_contiguous() && bytes.device().is_cpu(),
                 "bytes_view needs a contiguous 1-D uint8 CPU tensor (string_of copies any)");
  return std::string_view(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                          static_cast<size_t>(bytes.numel()));
}

}  // namespace dist::data
