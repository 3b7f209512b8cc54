// A checkpoint's pieces (checkpoint_pieces.h).
#include "train/checkpoint_pieces.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "dist/core/error.h"
#include "dist/train/safetensors.h"
#include "train/checkpoint_checksums.h"
#include "train/safetensors_reader.h"

namespace dist::detail {
namespace {

constexpr char kPieceFormat[] = "dist.checkpoint.piece/1";
constexpr char kBeginPrefix[] = "begin/";
constexpr char kShapePrefix[] = "shape/";

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text;
  for (size_t i = 0; i < shape.size(); ++i) text += (i == 0 ? "" : ",") + std::to_string(shape[i]);
  return text;
}

[[noreturn]] void piece_fail(const std::string& piece, const std::string& message) {
  throw DataError(concat("checkpoint piece '", piece, "': ", message));
}

const std::string& piece_entry(const std::string& piece,
                               const std::map<std::string, std::string>& meta,
                               const std::string& key) {
  auto it = meta.find(key);
  if (it == meta.end()) piece_fail(piece, "metadata '" + key + "' is missing");
  return it->second;
}

int64_t piece_number(const std::string& piece, const std::string& text, const std::string& what) {
  try {
    size_t used = 0;
    const int64_t v = std::stoll(text, &used);
    if (used == text.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  piece_fail(piece, concat(what, " is '", text, "', not a count"));
}

std::vector<int64_t> parse_shape(const std::string& piece, const std::string& text,
                                 const std::string& what) {
  std::vector<int64_t> shape;
  size_t start = 0;
  while (!text.empty() && start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    shape.push_back(piece_number(piece, text.substr(start, comma - start), what));
    start = comma + 1;
  }
  return shape;
}

// One tensor put back together from the pieces' ranges (or a counter every piece holds whole):
// whole, or only the range of it the reader keeps.
struct Assembly {
  bool counter = false;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  std::optional<ElementRange> kept;  // the reader keeps only this range of the elements
  at::Tensor values;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) of each piece's range
};

// The element count of `shape`, or -1 when it overflows.
int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d != 0 && count > std::numeric_limits<int64_t>::max() / d) return -1;
    count *= d;
  }
  return count;
}

// Checks a piece's tensor `entry` against the metadata and the pieces before it, and readies
// `assembly` for its values: returns where its range begins (0 for a counter). `file_bytes`:
// the size of all pieces together, which no tensor they hold can exceed.
int64_t add_piece_tensor(const std::string& piece, const SafetensorsReader::Entry& entry,
                         const std::map<std::string, std::string>& meta, int64_t file_bytes,
                         const WantedRanges& wanted, Assembly& assembly) {
  const std::string& name = entry.name;
  const bool counter = meta.count(kBeginPrefix + name) == 0;
  if ((assembly.values.defined() && assembly.counter != counter) ||
      (assembly.values.defined() && assembly.values.scalar_type() != entry.dtype))
    piece_fail(piece,
               concat("tensor '", name, "' is ", entry.dtype, counter ? " held whole" : " a range",
                      " here but not in the pieces before it"));
  assembly.counter = counter;
  if (counter) return 0;  // read whole, the largest kept
  const auto shape = parse_shape(piece, piece_entry(piece, meta, kShapePrefix + name), "its shape");
  const int64_t numel = element_count(shape);
  const int64_t begin =
      piece_number(piece, piece_entry(piece, meta, kBeginPrefix + name), "its begin");
  if (numel < 0 || numel > file_bytes / entry.element_size || entry.shape.size() != 1 ||
      begin > numel - entry.numel || (assembly.values.defined() && assembly.shape != shape))
    piece_fail(piece, concat("tensor '", name, "': ", entry.numel, " elements from element ", begin,
                             " of a tensor of shape ", at::IntArrayRef(shape),
                             " do not fit it, or the shape is not the other pieces' or is "
                             "larger than all pieces together"));
  if (!assembly.values.defined()) {
    assembly.shape = shape;
    assembly.numel = numel;
    const auto kept = wanted ? wanted(name) : std::nullopt;
    if (kept && kept->begin >= 0 && kept->count >= 0 && kept->begin <= numel - kept->count)
      assembly.kept = kept;
    const auto options = at::TensorOptions().dtype(entry.dtype);
    assembly.values = assembly.kept ? at::empty({kept->count}, options) : at::empty(shape, options);
  }
  if (entry.numel > 0) assembly.ranges.emplace_back(begin, begin + entry.numel);
  return begin;
}

// Reads piece `w` of the save `of`, checked, into the assemblies.
void read_piece(const std::string& path, const PiecesOf& of, int w, int64_t file_bytes, Env* env,
                const WantedRanges& wanted, std::map<std::string, Assembly>& assemblies) {
  const std::string piece = checkpoint_piece_path(path, w, of.pieces);
  const SafetensorsReader file(piece, env);
  const auto& meta = file.metadata();
  if (piece_entry(piece, meta, "format") != kPieceFormat)
    piece_fail(piece, concat("not a checkpoint piece (format '", piece_entry(piece, meta, "format"),
                             "')"));
  if (piece_number(piece, piece_entry(piece, meta, "piece"), "piece") != w ||
      piece_number(piece, piece_entry(piece, meta, kCheckpointPieces), "pieces") != of.pieces ||
      piece_number(piece, piece_entry(piece, meta, "step"), "step") != of.step ||
      piece_entry(piece, meta, kCheckpointSave) != of.save)
    piece_fail(piece,
               concat("it is piece ", piece_entry(piece, meta, "piece"), " of ",
                      piece_entry(piece, meta, kCheckpointPieces), " of the checkpoint of step ",
                      piece_entry(piece, meta, "step"), " saved as ",
                      piece_entry(piece, meta, kCheckpointSave), ", not piece ", w, " of ",
                      of.pieces, " of step ", of.step, " saved as ", of.save));
  std::map<std::string, int64_t> begins;
  for (const auto& entry : file.entries())
    begins[entry.name] =
        add_piece_tensor(piece, entry, meta, file_bytes, wanted, assemblies[entry.name]);
  std::map<std::string, at::Tensor> counters;
  const std::string problem = read_sealed_file(
      file,
      [&](const SafetensorsReader::Entry& entry) -> TakeBytes {
        Assembly& assembly = assemblies[entry.name];
        if (assembly.counter) return nullptr;
        const ElementRange range = assembly.kept.value_or(ElementRange{0, assembly.numel});
        const int64_t begin = begins[entry.name];
        return [&assembly, range, begin](const char* bytes, size_t size, int64_t first) {
          copy_range_elements(bytes, size, begin + first, range, assembly.values);
        };
      },
      counters);
  if (!problem.empty()) piece_fail(piece, problem);
  for (auto& [name, t] : counters) {
    Assembly& assembly = assemblies[name];
    assembly.values = assembly.values.defined() ? at::maximum(assembly.values, t) : t;
  }
}

// Every element once: the ranges, sorted, tile [0, numel) without overlapping.
void check_covered(const std::string& path, const std::string& name, Assembly& whole) {
  if (whole.counter) return;
  std::sort(whole.ranges.begin(), whole.ranges.end());
  int64_t next = 0;
  for (const auto& [begin, end] : whole.ranges) {
    if (begin != next)
      throw DataError(concat("checkpoint '", path, "': tensor '", name, "': its pieces ",
                             begin < next ? "overlap" : "leave a gap", " at element ",
                             std::min(begin, next), " of ", whole.numel,
                             "; are the pieces from different checkpoints?"));
    next = end;
  }
  if (next != whole.numel)
    throw DataError(concat("checkpoint '", path, "': tensor '", name, "': its pieces hold ", next,
                           " of its ", whole.numel,
                           " elements; are the pieces from different checkpoints?"));
}

}  // namespace

std::string checkpoint_piece_path(const std::string& path, int piece, int pieces) {
  return concat(path, ".piece-", piece, "-of-", pieces);
}

bool is_checkpoint_piece(const std::string& name, const std::string& checkpoint) {
  const std::string prefix = checkpoint + ".piece-";
  return name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
         name.find(".tmp.") == std::string::npos;
}

void write_checkpoint_piece(const std::string& path, const PiecesOf& of, int piece,
                            const std::vector<PieceTensor>& tensors, Env* env) {
  std::vector<std::pair<std::string, at::Tensor>> named;
  std::map<std::string, std::string> meta{{"format", kPieceFormat},
                                          {"piece", std::to_string(piece)},
                                          {kCheckpointPieces, std::to_string(of.pieces)},
                                          {"step", std::to_string(of.step)},
                                          {kCheckpointSave, of.save}};
  for (const auto& t : tensors) {
    named.emplace_back(t.name, t.values.detach().contiguous());
    if (t.whole) continue;
    meta[kBeginPrefix + t.name] = std::to_string(t.begin);
    meta[kShapePrefix + t.name] = shape_text(t.shape);
  }
  seal_checkpoint(named, meta);
  save_safetensors(checkpoint_piece_path(path, piece, of.pieces), named, meta, env);
}

void read_checkpoint_pieces(const std::string& path, const PiecesOf& of, Env* env,
                            const WantedRanges& wanted, CheckedTensors& tensors) {
  int64_t file_bytes = 0;
  for (int w = 0; w < of.pieces; ++w) {
    const std::string piece = checkpoint_piece_path(path, w, of.pieces);
    if (!env->file_exists(piece))
      throw DataError(concat("checkpoint '", path, "' was written in ", of.pieces,
                             " pieces, one by each worker, and piece '", piece,
                             "' is missing; every piece belongs beside the checkpoint"));
    file_bytes += static_cast<int64_t>(env->new_random_access_file(piece)->size());
  }
  std::map<std::string, Assembly> assemblies;
  for (int w = 0; w < of.pieces; ++w) read_piece(path, of, w, file_bytes, env, wanted, assemblies);
  for (auto& [name, assembly] : assemblies) {
    check_covered(path, name, assembly);
    if (tensors.tensors.count(name) != 0)
      throw DataError(concat("checkpoint '", path, "': tensor '", name,
                             "' is both in the checkpoint's file and in its pieces"));
    tensors.tensors[name] = std::move(assembly.values);
    if (assembly.kept) tensors.whole_shapes[name] = assembly.shape;
  }
}

}  // namespace dist::detail
