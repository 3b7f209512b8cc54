#include "dist/train/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "dist/core/error.h"
#include "dist/core/printable.h"
#include "train/safetensors_reader.h"

// The data section is little-endian; writing tensors' memory as is needs a little-endian host.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes little-endian");

namespace dist {
// Named, not anonymous: SafetensorsReader (safetensors_reader.h) holds its reader and parser.
namespace safetensors_format {

using nlohmann::json;

// The reference implementation's limit: a bigger header is a corrupt or hostile file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr char kMetadataKey[] = "__metadata__";

struct Dtype {
  const char* name;
  torch::ScalarType type;
  uint64_t size;
};

constexpr Dtype kDtypes[] = {
    {"F64", torch::kDouble, 8},    {"F32", torch::kFloat, 4}, {"F16", torch::kHalf, 2},
    {"BF16", torch::kBFloat16, 2}, {"I64", torch::kLong, 8},  {"I32", torch::kInt, 4},
    {"I16", torch::kShort, 2},     {"I8", torch::kChar, 1},   {"U8", torch::kByte, 1},
    {"BOOL", torch::kBool, 1},
};
constexpr char kDtypeList[] = "F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL";

const Dtype* find_dtype(torch::ScalarType type) {
  for (const Dtype& d : kDtypes)
    if (d.type == type) return &d;
  return nullptr;
}

const Dtype* find_dtype(const std::string& name) {
  for (const Dtype& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

// ---- writing ----------------------------------------------------------------------------

// The header text (padded) and the contiguous CPU tensors in file order.
std::pair<std::string, std::vector<torch::Tensor>> build_header(
    const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  std::vector<torch::Tensor> data;
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    std::string where = detail::concat("save_safetensors('", path, "'): tensor '", name, "'");
    DIST_CHECK_ARG(!name.empty(), "save_safetensors('", path, "'): a tensor name is empty");
    DIST_CHECK_ARG(name != kMetadataKey, where, ": the name is reserved for the metadata");
    DIST_CHECK_ARG(names.insert(name).second, where, ": duplicate name");
    DIST_CHECK_ARG(tensor.defined(), where, " is undefined");
    DIST_CHECK_ARG(tensor.layout() == torch::kStrided, where, " has layout ", tensor.layout(),
                   "; only dense (strided) tensors can be saved");
    const Dtype* dtype = find_dtype(tensor.scalar_type());
    DIST_CHECK_ARG(dtype != nullptr, where, " has dtype ", tensor.scalar_type(),
                   ", which safetensors does not support here; supported: ", kDtypeList);
    torch::Tensor cpu = tensor.detach().to(torch::kCPU).contiguous();
    uint64_t bytes = static_cast<uint64_t>(cpu.numel()) * dtype->size;
    json entry = json::object();
    entry["dtype"] = dtype->name;
    entry["shape"] = cpu.sizes().vec();
    entry["data_offsets"] = json::array({offset, offset + bytes});
    header[name] = std::move(entry);
    offset += bytes;
    data.push_back(std::move(cpu));
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    throw InvalidArgument(
        detail::concat("save_safetensors('", path,
                       "'): tensor names and metadata must be valid UTF-8: ", e.what()));
  }
  // Spaces are valid JSON whitespace; they align the data section to 8 bytes.
  text.append((8 - text.size() % 8) % 8, ' ');
  return {std::move(text), std::move(data)};
}

// ---- reading ----------------------------------------------------------------------------

struct HeaderEntry {
  std::string name;
  const Dtype* dtype;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& path, uint64_t data_size) : path_(path), data_size_(data_size) {}

  [[noreturn]] void fail(const std::string& message) const {
    // What the header holds (names, shapes, values) is escaped and bounded.
    throw DataError(detail::concat("safetensors file '", path_, "': ", printable(message, 1024)));
  }
  [[noreturn]] void fail(const std::string& tensor, const std::string& message) const {
    fail(detail::concat("tensor '", tensor, "': ", message));
  }

  std::map<std::string, std::string> metadata(const json& value) const {
    if (!value.is_object()) fail(detail::concat("\"", kMetadataKey, "\" must be an object"));
    std::map<std::string, std::string> out;
    for (const auto& [key, item] : value.items()) {
      if (!item.is_string())
        fail(detail::concat("metadata '", key, "' must be a string, got ", item.dump()));
      out[key] = item.get<std::string>();
    }
    return out;
  }

  HeaderEntry entry(const std::string& name, const json& value) const {
    if (!value.is_object()) fail(name, "must be an object with dtype, shape and data_offsets");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!value.contains(field)) fail(name, detail::concat("missing \"", field, "\""));
    const json& dtype_name = value["dtype"];
    const Dtype* dtype =
        dtype_name.is_string() ? find_dtype(dtype_name.get<std::string>()) : nullptr;
    if (dtype == nullptr)
      fail(name,
           detail::concat("unsupported dtype ", dtype_name.dump(), "; supported: ", kDtypeList));
    HeaderEntry e{name, dtype, {}, 0, 0};
    uint64_t bytes = byte_size(e, value["shape"]);
    offsets(e, value["data_offsets"]);
    if (e.end > data_size_)
      fail(name,
           detail::concat("data_offsets [", e.begin, ", ", e.end, "] lie past the end of ",
                          "the data section (", data_size_, " bytes); the file is truncated"));
    if (e.end - e.begin != bytes)
      fail(name, detail::concat("data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin,
                                " bytes, but shape ", value["shape"].dump(), " of dtype ",
                                dtype->name, " needs ", bytes));
    return e;
  }

 private:
  // Fills e.shape and returns numel * itemsize, refusing anything that overflows.
  uint64_t byte_size(HeaderEntry& e, const json& shape) const {
    if (!shape.is_array()) fail(e.name, "\"shape\" must be an array, got " + shape.dump());
    uint64_t numel = 1;
    for (const json& dim : shape) {
      if (dim.is_number_integer() && !dim.is_number_unsigned())
        fail(e.name, "negative dimension in shape " + shape.dump());
      if (!dim.is_number_unsigned())
        fail(e.name, "shape entries must be non-negative integers, got " + shape.dump());
      uint64_t size = dim.get<uint64_t>();
      if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(numel, size, &numel) ||
          numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(e.name, "element count of shape " + shape.dump() + " overflows");
      e.shape.push_back(static_cast<int64_t>(size));
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(numel, e.dtype->size, &bytes))
      fail(e.name, detail::concat("byte size of shape ", shape.dump(), " of dtype ", e.dtype->name,
                                  " overflows"));
    return bytes;
  }

  void offsets(HeaderEntry& e, const json& value) const {
    if (!value.is_array() || value.size() != 2 || !value[0].is_number_unsigned() ||
        !value[1].is_number_unsigned())
      fail(e.name, "\"data_offsets\" must be two non-negative integers, got " + value.dump());
    e.begin = value[0].get<uint64_t>();
    e.end = value[1].get<uint64_t>();
    if (e.begin > e.end)
      fail(e.name, detail::concat("data_offsets [", e.begin, ", ", e.end, "] are reversed"));
  }

  std::string path_;
  uint64_t data_size_;
};

// Tensors must tile the data section exactly, as the reference implementation requires.
void check_layout(const HeaderParser& parser, const std::vector<HeaderEntry>& entries,
                  uint64_t data_size) {
  uint64_t expected = 0;
  const HeaderEntry* previous = nullptr;
  for (const HeaderEntry& e : entries) {
    if (e.begin < expected)
      parser.fail(e.name, detail::concat("data_offsets [", e.begin, ", ", e.end,
                                         "] overlap those of tensor '", previous->name, "' (",
                                         previous->begin, ", ", previous->end, ")"));
    if (e.begin > expected)
      parser.fail(e.name,
                  detail::concat("data_offsets [", e.begin, ", ", e.end, "] leave a gap of ",
                                 e.begin - expected, " bytes after byte ", expected));
    expected = e.end;
    previous = &e;
  }
  if (expected != data_size)
    parser.fail(detail::concat("the data section has ", data_size - expected,
                               " bytes after the last tensor that no tensor claims"));
}

// A safetensors file read through an Env, whose errors name the operation, the file and the
// reason; they become the file's DataError.
class FileReader {
 public:
  FileReader(std::string path, Env* env) : path_(std::move(path)) {
    DIST_CHECK_ARG(env != nullptr, "load_safetensors('", path_, "'): the Env is null");
    try {
      file_ = env->new_random_access_file(path_);
    } catch (const DataError& e) {
      fail(e.what());
    }
    size_ = file_->size();
  }

  [[noreturn]] void fail(const std::string& message) const {
    // What the header holds (names, shapes, values) is escaped and bounded.
    throw DataError(detail::concat("safetensors file '", path_, "': ", printable(message, 1024)));
  }
  void read(uint64_t offset, uint64_t size, void* out) const {
    try {
      file_->read(offset, size, out);
    } catch (const DataError& e) {
      fail(e.what());
    }
  }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // The header, a JSON object, and the offset of the data section after it.
  json header(uint64_t* data_start) const {
    if (size_ < 8)
      fail(detail::concat("the file is ", size_, " bytes long, shorter than the 8-byte header ",
                          "length; it is truncated or not a safetensors file"));
    unsigned char length[8];
    read(0, 8, length);
    uint64_t header_size = 0;
    for (int i = 0; i < 8; ++i) header_size |= static_cast<uint64_t>(length[i]) << (8 * i);
    if (header_size > kMaxHeaderBytes)
      fail(detail::concat("header length ", header_size, " exceeds the limit of ", kMaxHeaderBytes,
                          " bytes; the file is corrupt or not a safetensors file"));
    if (header_size > size_ - 8)
      fail(detail::concat("header length ", header_size, " is more than the ", size_ - 8,
                          " bytes that follow it; the file is truncated"));
    std::string text(header_size, '\0');
    read(8, header_size, text.data());
    json header;
    try {
      header = json::parse(text);
    } catch (const json::exception& e) {
      fail(detail::concat("the header is not valid JSON: ", e.what()));
    }
    if (!header.is_object()) fail("the header must be a JSON object, got " + header.dump());
    *data_start = 8 + header_size;
    return header;
  }

  // HeaderEntry `e`'s tensor, allocated only now that every size is checked against the file.
  torch::Tensor tensor(const HeaderParser& parser, const HeaderEntry& e,
                       uint64_t data_start) const {
    torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype->type));
    const uint64_t bytes = e.end - e.begin;
    try {
      file_->read(data_start + e.begin, bytes, t.data_ptr());
    } catch (const DataError& error) {
      parser.fail(e.name, std::string("cannot read the data: ") + error.what());
    }
    if (e.dtype->type == torch::kBool) {
      const auto* p = static_cast<const unsigned char*>(t.data_ptr());
      if (std::any_of(p, p + bytes, [](unsigned char b) { return b > 1; }))
        parser.fail(e.name, "BOOL data holds a byte other than 0 or 1");
    }
    return t;
  }

 private:
  std::string path_;
  std::unique_ptr<RandomAccessFile> file_;
  uint64_t size_ = 0;
};

}  // namespace safetensors_format

using namespace safetensors_format;  // NOLINT(google-build-using-namespace): this file only

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata, Env* env) {
  // Not a structured binding: C++17 does not let the lambda below capture one (clang refuses).
  const auto built = build_header(path, tensors, metadata);
  const std::string& header = built.first;
  const std::vector<torch::Tensor>& data = built.second;
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  detail::write_file_atomically(env, path, "safetensors file", [&](WritableFile& file) {
    file.append(length, sizeof(length));
    file.append(header.data(), header.size());
    for (const torch::Tensor& t : data) file.append(t.data_ptr(), t.numel() * t.element_size());
  });
}

SafetensorsFile load_safetensors(const std::string& path, Env* env) {
  const detail::SafetensorsReader file(path, env);
  SafetensorsFile result;
  result.metadata = file.metadata();
  for (const auto& entry : file.entries())
    result.tensors.emplace_back(entry.name, file.read(entry));
  return result;
}

namespace detail {

struct SafetensorsReader::File {
  File(const std::string& path, Env* env) : reader(path, env) {}
  FileReader reader;
  std::unique_ptr<HeaderParser> parser;
  std::vector<HeaderEntry> entries;  // as entries_
  uint64_t data_start = 0;
};

SafetensorsReader::SafetensorsReader(const std::string& path, Env* env)
    : file_(std::make_unique<File>(path, env)) {
  const json header = file_->reader.header(&file_->data_start);
  const uint64_t data_size = file_->reader.size() - file_->data_start;
  file_->parser = std::make_unique<HeaderParser>(path, data_size);
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      metadata_ = file_->parser->metadata(value);
    } else {
      file_->entries.push_back(file_->parser->entry(name, value));
    }
  }
  // By offsets; an empty tensor before a tensor that starts where it does (ties stay in the
  // header's order, by name).
  std::stable_sort(file_->entries.begin(), file_->entries.end(),
                   [](const HeaderEntry& a, const HeaderEntry& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  check_layout(*file_->parser, file_->entries, data_size);
  for (const HeaderEntry& e : file_->entries) {
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;  // checked not to overflow
    entries_.push_back({e.name, e.dtype->type, e.shape, numel, static_cast<int64_t>(e.dtype->size),
                        file_->data_start + e.begin});
  }
}

SafetensorsReader::~SafetensorsReader() = default;

const std::string& SafetensorsReader::path() const { return file_->reader.path(); }
uint64_t SafetensorsReader::size() const { return file_->reader.size(); }
const std::map<std::string, std::string>& SafetensorsReader::metadata() const { return metadata_; }
const std::vector<SafetensorsReader::Entry>& SafetensorsReader::entries() const { return entries_; }

at::Tensor SafetensorsReader::read(const Entry& entry) const {
  const auto index = static_cast<size_t>(&entry - entries_.data());
  DIST_INTERNAL_ASSERT(index < entries_.size(), "read: an entry of another file");
  return file_->reader.tensor(*file_->parser, file_->entries[index], file_->data_start);
}

void SafetensorsReader::read_in_pieces(
    const Entry& entry, size_t bytes_per_piece,
    const std::function<void(const char*, size_t, int64_t)>& take) const {
  const auto element = static_cast<size_t>(entry.element_size);
  DIST_INTERNAL_ASSERT(bytes_per_piece >= element && bytes_per_piece % element == 0,
                       "read_in_pieces: ", bytes_per_piece, " bytes per piece");
  const size_t total = static_cast<size_t>(entry.numel) * element;
  std::vector<char> buffer(std::min(bytes_per_piece, total));
  for (size_t done = 0; done < total;) {
    const size_t bytes = std::min(buffer.size(), total - done);
    file_->reader.read(entry.offset + done, bytes, buffer.data());
    take(buffer.data(), bytes, static_cast<int64_t>(done / element));
    done += bytes;
  }
}

}  // namespace detail
}  // namespace dist
