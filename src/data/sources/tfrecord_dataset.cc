// tfrecord_dataset: a file source streaming the records of TFRecord files.
#include "dist/data/tfrecord_dataset.h"

#include <cstring>
#include <mutex>
#include <optional>

#include "data/dataset_node.h"
#include "data/epoch_random.h"
#include "data/records/tfrecord_file.h"
#include "dist/core/error.h"
#include "dist/data/files.h"

namespace dist::data {
namespace {

// Record counts per file, found once (on first use) and shared by the node's copies: once
// taken, the records each epoch reads (no more, should a file grow), and the damage that cut a
// file short when the options count up to damage.
class RecordCounts {
 public:
  RecordCounts(std::vector<std::string> files, const TFRecordOptions& options)
      : files_(std::move(files)), options_(options), counts_(files_.size()) {}
  const detail::ReadableRecords& of(size_t file) {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<detail::ReadableRecords>& count = counts_[file];
    if (!count) {
      count = detail::count_readable_records(files_[file], options_.compression, options_.env);
      if (!count->damage.empty() && !options_.count_up_to_damage) {
        const std::string damage = count->damage;
        count.reset();
        throw DataError(damage);  // as the reading would, before anything is read
      }
    }
    return *count;
  }
  // The count if it was taken (by cardinality(), or a skip), without taking it: reading does not
  // walk a file twice for a count nobody asked for.
  std::optional<detail::ReadableRecords> known(size_t file) {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_[file];
  }
  int64_t total() {
    int64_t sum = 0;
    for (size_t f = 0; f < files_.size(); ++f) sum += of(f).records;
    return sum;
  }

 private:
  std::vector<std::string> files_;
  TFRecordOptions options_;
  std::mutex mu_;
  std::vector<std::optional<detail::ReadableRecords>> counts_;
};

class TFRecordIterator : public detail::IteratorNode {
 public:
  TFRecordIterator(std::shared_ptr<const std::vector<std::string>> files,
                   std::shared_ptr<RecordCounts> counts, std::vector<size_t> order,
                   const TFRecordOptions& options)
      : files_(std::move(files)),
        counts_(std::move(counts)),
        order_(std::move(order)),
        options_(options) {}

  std::optional<Element> next() override {
    while (open_next_file_if_needed()) {
      const int64_t index = reader_->records_read();
      if (counted_ && index >= counted_->records) {  // all the file held when it was counted
        reader_.reset();
        ++position_;
        if (!counted_->damage.empty()) throw DataError(counted_->damage);  // once a file, epoch
        continue;
      }
      try {
        if (reader_->next(&record_)) return element(index);
      } catch (const DataError&) {
        // A record whose data is corrupt was passed, and a retry (ignore_errors) reads the
        // next one; other damage (truncation, a bad length) ends this file's reading.
        if (reader_->failed()) {
          reader_.reset();
          ++position_;
        }
        throw;
      }
      reader_.reset();
      ++position_;
    }
    return std::nullopt;
  }

  int64_t skip(int64_t n) override {
    int64_t skipped = 0;
    while (skipped < n && position_ < order_.size()) {
      if (!reader_) {
        // A whole unopened file whose count is known is passed without reading it.
        const int64_t in_file = counts_->of(order_[position_]).records;
        if (in_file <= n - skipped) {
          skipped += in_file;
          ++position_;
          continue;
        }
        open_reader();
      }
      if (reader_->records_read() < counts_->of(order_[position_]).records && reader_->skip()) {
        ++skipped;
      } else {
        reader_.reset();
        ++position_;
      }
    }
    return skipped;
  }

 private:
  bool open_next_file_if_needed() {
    if (reader_) return true;
    if (position_ >= order_.size()) return false;
    open_reader();
    return true;
  }

  // Opens the file at position_, with its count if one was taken (looked up once a file, not
  // once a record). A file that cannot be opened (it vanished since the dataset was made) is
  // passed: a retry (ignore_errors) reads the next file instead of failing here forever.
  void open_reader() {
    try {
      reader_ = std::make_unique<detail::TFRecordFileReader>((*files_)[order_[position_]],
                                                             options_.compression, options_.env);
    } catch (const DataError&) {
      ++position_;
      throw;
    }
    file_name_ = at::Tensor();
    counted_ = counts_->known(order_[position_]);
  }

  Element element(int64_t index) const {
    at::Tensor bytes = string_tensor(record_);
    if (!options_.with_source) return {bytes};
    // One tensor of the file's name for all its records (elements share it; nobody writes it).
    if (!file_name_.defined()) file_name_ = string_tensor(reader_->path());
    return {bytes, file_name_, at::scalar_tensor(index, at::kLong)};
  }

  std::shared_ptr<const std::vector<std::string>> files_;
  std::shared_ptr<RecordCounts> counts_;
  std::vector<size_t> order_;
  TFRecordOptions options_;
  size_t position_ = 0;  // in order_: the file being read
  std::unique_ptr<detail::TFRecordFileReader> reader_;
  std::optional<detail::ReadableRecords> counted_;  // reader_'s file's count, if taken
  std::string record_;            // reused: one allocation for the records of similar size
  mutable at::Tensor file_name_;  // the open file's, for with_source
};

class TFRecordNode : public detail::FileSourceNode {
 public:
  TFRecordNode(std::vector<std::string> files, const TFRecordOptions& options)
      : files_(std::make_shared<const std::vector<std::string>>(std::move(files))),
        counts_(std::make_shared<RecordCounts>(*files_, options)),
        options_(options) {}
  std::unique_ptr<detail::IteratorNode> make_iterator(int64_t epoch) const override {
    std::vector<size_t> order(files_->size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (options_.shuffle_files) {
      auto rng = detail::epoch_stream(options_.seed, static_cast<uint64_t>(epoch));
      order = detail::permutation(files_->size(), rng);
    }
    return std::make_unique<TFRecordIterator>(files_, counts_, std::move(order), options_);
  }
  int64_t cardinality() const override { return counts_->total(); }
  std::string describe() const override {
    return "tfrecord_dataset(" + std::to_string(files_->size()) + " files" +
           (options_.compression == Compression::kNone
                ? std::string()
                : std::string(", ") + compression_name(options_.compression)) +
           ")";
  }
  const std::vector<std::string>& files() const override { return *files_; }
  detail::NodePtr with_files(std::vector<std::string> files) const override {
    return std::make_shared<TFRecordNode>(std::move(files), options_);
  }

 private:
  std::shared_ptr<const std::vector<std::string>> files_;
  std::shared_ptr<RecordCounts> counts_;
  TFRecordOptions options_;
};

}  // namespace

Dataset tfrecord_dataset(std::vector<std::string> files, const TFRecordOptions& options) {
  DIST_CHECK_ARG(!files.empty(),
                 "tfrecord_dataset needs at least one file (match_files finds "
                 "them by pattern)");
  DIST_CHECK_ARG(options.env != nullptr, "tfrecord_dataset: TFRecordOptions::env is null");
  for (const auto& file : files) {
    const FileKind kind = options.env->file_info(file).kind;
    DIST_CHECK(kind != FileKind::kMissing, DataError, "tfrecord_dataset: cannot read '", file,
               "': No such file or directory");
    DIST_CHECK(kind == FileKind::kRegular, DataError, "tfrecord_dataset: '", file, "' is ",
               file_kind_phrase(kind), ", not a regular file: give TFRecord files");
  }
  return Dataset(std::make_shared<TFRecordNode>(std::move(files), options));
}

}  // namespace dist::data
