// image_folder: the images below a directory's class folders, as a file source.
#include "dist/data/image_folder.h"

#include <algorithm>
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

bool is_image_name(const std::string& name) {
  std::string extension = std::filesystem::path(name).extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension == ".png" || extension == ".jpg" || extension == ".jpeg";
}

// The whole file as uint8 [size], read through `env`; DataError naming it if it cannot be
// read or is not a regular file (the Env's open refuses a FIFO named like an image at once,
// so it does not block the pipeline).
at::Tensor read_file(Env* env, const std::string& path) {
  try {
    const auto file = env->new_random_access_file(path);
    at::Tensor bytes = at::empty({static_cast<int64_t>(file->size())}, at::kByte);
    file->read(0, file->size(), bytes.data_ptr<uint8_t>());  // throws if the file shrank
    return bytes;
  } catch (const DataError& e) {
    throw DataError(::dist::detail::concat("image_folder: cannot read '", path, "': ", e.what()));
  }
}

struct Listing {
  std::vector<std::string> files;  // sorted within each class, classes in order
  std::vector<int64_t> labels;
};

class ImageFolderIterator : public detail::IteratorNode {
 public:
  ImageFolderIterator(std::shared_ptr<const Listing> listing, std::vector<size_t> order,
                      bool with_source, Env* env)
      : listing_(std::move(listing)),
        order_(std::move(order)),
        with_source_(with_source),
        env_(env) {}
  std::optional<Element> next() override {
    if (index_ >= order_.size()) return std::nullopt;
    const size_t file = order_[index_++];
    const std::string& path = listing_->files[file];
    Element element{read_file(env_, path), at::scalar_tensor(listing_->labels[file], at::kLong)};
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
  Env* env_;
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
    return std::make_unique<ImageFolderIterator>(listing_, std::move(order), options_.with_source,
                                                 options_.env);
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

std::string joined(const std::string& dir, const std::string& name) {
  return !dir.empty() && dir.back() == '/' ? dir + name : dir + "/" + name;
}

// What is at `path`, through `env`; DataError naming it when it cannot be looked at.
FileInfo info_of(Env* env, const std::string& path) {
  try {
    return env->file_info(path);
  } catch (const DataError& e) {
    throw DataError(::dist::detail::concat("image_folder: cannot read '", printable(path, 256),
                                           "': ", e.what()));
  }
}

// The sorted entry names of directory `dir`; DataError naming it when it cannot be listed.
std::vector<std::string> entries_of(Env* env, const std::string& dir) {
  std::vector<std::string> names;
  try {
    names = env->get_children(dir);
  } catch (const DataError& e) {
    throw DataError(::dist::detail::concat("image_folder: cannot list '", printable(dir, 256),
                                           "': ", e.what()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Every folder walked so far in one class, by identity, to the path it was first reached by:
// a link back up (c0/loop -> ..) would otherwise be walked 40 levels deep, listing each image
// again under this class each time.
using Walked = std::map<std::string, std::string>;

// Adds the images below `dir` (sub-folders and links to them followed) to `files`. An entry
// that is not a folder is listed if named like an image, whatever it is (a FIFO, a link to
// nothing, a file that vanished since the listing): reading it names the problem.
void walk_class(Env* env, const std::string& dir, const std::string& name, Walked& walked,
                std::vector<std::string>& files) {
  for (const auto& entry : entries_of(env, dir)) {
    const std::string path = joined(dir, entry);
    const FileInfo info = info_of(env, path);
    if (info.kind == FileKind::kDirectory) {
      const auto [first, fresh] = walked.emplace(info.identity, path);
      DIST_CHECK(fresh, DataError, "image_folder: '", printable(path, 256), "' is the folder '",
                 printable(first->second, 256),
                 "' again (a symbolic link loop, or a second link to it): its images would be "
                 "listed again under class '",
                 printable(name, 256), "'; remove the link");
      walk_class(env, path, name, walked, files);
    } else if (is_image_name(entry)) {
      files.push_back(path);
    }
  }
}

// The images below one class folder, sub-folders (and links to them) followed, sorted.
std::vector<std::string> list_class(Env* env, const std::string& root, const std::string& name) {
  std::vector<std::string> files;
  Walked walked{{info_of(env, root).identity, root}};
  walk_class(env, root, name, walked, files);
  std::sort(files.begin(), files.end());
  return files;
}

Listing list_images(const std::string& directory, Env* env) {
  const auto classes = image_folder_classes(directory, env);
  Listing listing;
  for (size_t label = 0; label < classes.size(); ++label) {
    std::vector<std::string> files =
        list_class(env, joined(directory, classes[label]), classes[label]);
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

std::vector<std::string> image_folder_classes(const std::string& directory, Env* env) {
  DIST_CHECK_ARG(env != nullptr, "image_folder: the Env is null");
  const FileKind kind = info_of(env, directory).kind;
  DIST_CHECK(kind == FileKind::kDirectory, DataError, "image_folder: '", directory, "' ",
             kind == FileKind::kMissing ? "does not exist" : "is not a directory",
             "; give a directory with one sub-folder of images per class");
  std::vector<std::string> classes;
  for (const auto& entry : entries_of(env, directory))
    if (info_of(env, joined(directory, entry)).kind == FileKind::kDirectory)
      classes.push_back(entry);
  DIST_CHECK(!classes.empty(), DataError, "image_folder: '", directory,
             "' has no sub-folders; the layout is DIR/<class>/<image>, one folder per class");
  return classes;  // sorted, as entries_of lists them
}

Dataset image_folder_files(const std::string& directory, const ImageFolderOptions& options) {
  return Dataset(std::make_shared<ImageFolderNode>(
      directory, std::make_shared<const Listing>(list_images(directory, options.env)), options));
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
