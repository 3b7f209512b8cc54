// image_folder: the images below a directory's class folders, as a file source.
#include "dist/data/image_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <utility>

#include "data/dataset_node.h"
#include "data/epoch_random.h"
#include "dist/core/error.h"
#include "dist/core/printable.h"
#include "dist/data/files.h"

namespace dist::data {
namespace {

namespace fs = std::filesystem;

bool is_image_name(const fs::path& path) {
  std::string extension = path.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension == ".png" || extension == ".jpg" || extension == ".jpeg";
}

// The whole file as uint8 [size]; DataError naming it if it cannot be read or is not a
// regular file (a FIFO put among the images must not block the pipeline).
at::Tensor read_file(const std::string& path) {
  struct stat info {};
  DIST_CHECK(::stat(path.c_str(), &info) == 0, DataError, "image_folder: cannot read '", path,
             "': ", std::strerror(errno));
  DIST_CHECK(S_ISREG(info.st_mode), DataError, "image_folder: '", path,
             "' is not a regular file (a FIFO or device named like an image)");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DIST_CHECK(fd >= 0, DataError, "image_folder: cannot open '", path, "': ", std::strerror(errno));
  at::Tensor bytes = at::empty({static_cast<int64_t>(info.st_size)}, at::kByte);
  auto* out = bytes.data_ptr<uint8_t>();
  int64_t done = 0;
  while (done < info.st_size) {
    const ssize_t got = ::read(fd, out + done, static_cast<size_t>(info.st_size - done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int error = errno;
      ::close(fd);
      DIST_CHECK(false, DataError, "image_folder: reading '", path, "' failed after ", done, " of ",
                 info.st_size, " bytes: ", got == 0 ? "the file shrank" : std::strerror(error));
    }
    done += got;
  }
  ::close(fd);
  return bytes;
}

struct Listing {
  std::vector<std::string> files;  // sorted within each class, classes in order
  std::vector<int64_t> labels;
};

class ImageFolderIterator : public detail::IteratorNode {
 public:
  ImageFolderIterator(std::shared_ptr<const Listing> listing, std::vector<size_t> order,
                      bool with_source)
      : listing_(std::move(listing)), order_(std::move(order)), with_source_(with_source) {}
  std::optional<Element> next() override {
    if (index_ >= order_.size()) return std::nullopt;
    const size_t file = order_[index_++];
    const std::string& path = listing_->files[file];
    Element element{read_file(path), at::scalar_tensor(listing_->labels[file], at::kLong)};
    if (with_source_) element.push_back(string_tensor(path));
    return element;
  }
  int64_t skip(int64_t n) override {
    const int64_t skipped = std::min<int64_t>(n, static_cast<int64_t>(order_.size() - index_));
    index_ += static_cast<size_t>(skipped);
    return skipped;
  }

 private:
  std::shared_ptr<const Listing> listing_;
  std::vector<size_t> order_;
  bool with_source_;
  size_t index_ = 0;
};

class ImageFolderNode : public detail::FileSourceNode {
 public:
  ImageFolderNode(std::string directory, std::shared_ptr<const Listing> listing,
                  const ImageFolderOptions& options)
      : directory_(std::move(directory)), listing_(std::move(listing)), options_(options) {}
  std::unique_ptr<detail::IteratorNode> make_iterator(int64_t epoch) const override {
    std::vector<size_t> order(listing_->files.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (options_.shuffle) {
      auto rng = detail::epoch_stream(options_.seed, static_cast<uint64_t>(epoch));
      order = detail::permutation(order.size(), rng);
    }
    return std::make_unique<ImageFolderIterator>(listing_, std::move(order), options_.with_source);
  }
  int64_t cardinality() const override { return static_cast<int64_t>(listing_->files.size()); }
  std::string describe() const override {
    return "image_folder('" + directory_ + "', " + std::to_string(listing_->files.size()) +
           " images)";
  }
  const std::vector<std::string>& files() const override { return listing_->files; }
  detail::NodePtr with_files(std::vector<std::string> files) const override {
    // `files` is a subsequence of ours: walk both to keep each file's label.
    auto subset = std::make_shared<Listing>();
    size_t at = 0;
    for (auto& file : files) {
      while (at < listing_->files.size() && listing_->files[at] != file) ++at;
      DIST_INTERNAL_ASSERT(at < listing_->files.size(), "with_files: ", file, " is not listed");
      subset->labels.push_back(listing_->labels[at++]);
      subset->files.push_back(std::move(file));
    }
    return std::make_shared<ImageFolderNode>(directory_, std::move(subset), options_);
  }

 private:
  std::string directory_;
  std::shared_ptr<const Listing> listing_;
  ImageFolderOptions options_;
};

// A directory's identity (device and inode, links followed), to notice one reached twice.
std::pair<dev_t, ino_t> folder_identity(const fs::path& path) {
  struct stat st {};
  DIST_CHECK(::stat(path.c_str(), &st) == 0, DataError, "image_folder: cannot read '",
             printable(path.string(), 256), "': ", std::strerror(errno));
  return {st.st_dev, st.st_ino};
}

// The images below one class folder, sub-folders (and links to them) followed, sorted.
std::vector<std::string> list_class(const fs::path& root, const std::string& name) {
  std::vector<std::string> files;
  // Every folder walked, by identity: a link back up (c0/loop -> ..) would otherwise be walked
  // 40 levels deep, listing each image again under this class each time.
  std::map<std::pair<dev_t, ino_t>, std::string> walked{{folder_identity(root), root.string()}};
  std::error_code error;
  for (fs::recursive_directory_iterator
           it(root, fs::directory_options::follow_directory_symlink, error),
       end;
       !error && it != end; it.increment(error)) {
    if (it->is_directory()) {
      const auto [first, fresh] = walked.emplace(folder_identity(it->path()), it->path().string());
      DIST_CHECK(fresh, DataError, "image_folder: '", printable(it->path().string(), 256),
                 "' is the folder '", printable(first->second, 256),
                 "' again (a symbolic link loop, or a second link to it): its images would be "
                 "listed again under class '",
                 printable(name, 256), "'; remove the link");
    } else if (is_image_name(it->path())) {
      files.push_back(it->path().string());
    }
  }
  DIST_CHECK(!error, DataError, "image_folder: cannot list '", printable(root.string(), 256),
             "': ", error.message());
  std::sort(files.begin(), files.end());
  return files;
}

Listing list_images(const std::string& directory) {
  const auto classes = image_folder_classes(directory);
  Listing listing;
  for (size_t label = 0; label < classes.size(); ++label) {
    std::vector<std::string> files =
        list_class(fs::path(directory) / classes[label], classes[label]);
    for (auto& file : files) {
      listing.files.push_back(std::move(file));
      listing.labels.push_back(static_cast<int64_t>(label));
    }
  }
  DIST_CHECK(!listing.files.empty(), DataError,
             "image_folder: no images (.png, .jpg, .jpeg) in "
             "the ",
             classes.size(), " class folders of '", directory,
             "'; the layout is DIR/<class>/<image>");
  return listing;
}

}  // namespace

std::vector<std::string> image_folder_classes(const std::string& directory) {
  std::error_code error;
  DIST_CHECK(fs::is_directory(directory, error), DataError, "image_folder: '", directory, "' ",
             fs::exists(directory, error) ? "is not a directory" : "does not exist",
             "; give a directory with one sub-folder of images per class");
  std::vector<std::string> classes;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error))
    if (it->is_directory()) classes.push_back(it->path().filename().string());
  DIST_CHECK(!error, DataError, "image_folder: cannot list '", directory, "': ", error.message());
  DIST_CHECK(!classes.empty(), DataError, "image_folder: '", directory,
             "' has no sub-folders; the layout is DIR/<class>/<image>, one folder per class");
  std::sort(classes.begin(), classes.end());
  return classes;
}

Dataset image_folder_files(const std::string& directory, const ImageFolderOptions& options) {
  return Dataset(std::make_shared<ImageFolderNode>(
      directory, std::make_shared<const Listing>(list_images(directory)), options));
}

Dataset image_folder(const std::string& directory, const DecodeImageOptions& decode,
                     const ImageFolderOptions& options, int64_t num_parallel_calls) {
  ImageFolderOptions with_source = options;
  with_source.with_source = true;
  return image_folder_files(directory, with_source)
      .map(
          [decode](Element e) {
            return Element{decode_image(e[0], decode, string_of(e[2])), e[1]};
          },
          MapOptions{num_parallel_calls});
}

}  // namespace dist::data
