// A checkpoint's pieces (checkpoint_pieces.h).
#include "train/checkpoint_pieces.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

#include "dist/core/error.h"
#include "dist/train/safetensors.h"
#include "train/checkpoint_checksums.h"

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

// One tensor put back together from the pieces' ranges.
struct Whole {
  at::Tensor values;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) of each piece's range
};

void add_range(const std::string& piece, const std::string& name, const at::Tensor& t,
               const std::map<std::string, std::string>& meta, Whole& whole) {
  const auto shape = parse_shape(piece, piece_entry(piece, meta, kShapePrefix + name), "its shape");
  if (shape.empty()) {  // a step counter, whole in every piece that has it
    if (t.dim() != 0) piece_fail(piece, "tensor '" + name + "' has no shape but is no scalar");
    whole.values = whole.values.defined() ? at::maximum(whole.values, t) : t;
    return;
  }
  const int64_t begin =
      piece_number(piece, piece_entry(piece, meta, kBeginPrefix + name), "its begin");
  if (!whole.values.defined()) whole.values = at::empty(shape, t.options());
  if (whole.values.sizes() != at::IntArrayRef(shape) || whole.values.dtype() != t.dtype() ||
      t.dim() != 1 || begin + t.numel() > whole.values.numel())
    piece_fail(piece, concat("tensor '", name, "': elements ", begin, " to ", begin + t.numel(),
                             " of ", t.scalar_type(), " ", at::IntArrayRef(shape),
                             " do not fit the tensor the other pieces hold (",
                             whole.values.scalar_type(), " ", whole.values.sizes(), ")"));
  whole.values.view(-1).narrow(0, begin, t.numel()).copy_(t);
  whole.ranges.emplace_back(begin, begin + t.numel());
}

// Every element once: the ranges, sorted, tile [0, numel).
void check_covered(const std::string& path, const std::string& name, Whole& whole) {
  if (whole.values.dim() == 0) return;
  std::sort(whole.ranges.begin(), whole.ranges.end());
  int64_t next = 0;
  for (const auto& [begin, end] : whole.ranges) {
    if (begin != next) break;
    next = end;
  }
  if (next != whole.values.numel())
    throw DataError(concat("checkpoint '", path, "': tensor '", name, "': its pieces hold ",
                           next == 0 ? "no run from its first element" : "its elements up to ",
                           next == 0 ? "" : std::to_string(next), " of ", whole.values.numel(),
                           " in one run; are the pieces from different checkpoints?"));
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

void write_checkpoint_piece(const std::string& path, int piece, int pieces, int64_t step,
                            const std::vector<PieceTensor>& tensors, Env* env) {
  std::vector<std::pair<std::string, at::Tensor>> named;
  std::map<std::string, std::string> meta{{"format", kPieceFormat},
                                          {"piece", std::to_string(piece)},
                                          {kCheckpointPieces, std::to_string(pieces)},
                                          {"step", std::to_string(step)}};
  for (const auto& t : tensors) {
    named.emplace_back(t.name, t.values.detach().contiguous());
    meta[kBeginPrefix + t.name] = std::to_string(t.begin);
    meta[kShapePrefix + t.name] = shape_text(t.shape);
  }
  seal_checkpoint(named, meta);
  save_safetensors(checkpoint_piece_path(path, piece, pieces), named, meta, env);
}

void read_checkpoint_pieces(const std::string& path, int pieces, int64_t step, Env* env,
                            std::map<std::string, at::Tensor>& tensors) {
  std::map<std::string, Whole> wholes;
  for (int w = 0; w < pieces; ++w) {
    const std::string piece = checkpoint_piece_path(path, w, pieces);
    if (!env->file_exists(piece))
      throw DataError(concat("checkpoint '", path, "' was written in ", pieces,
                             " pieces, one by each worker, and piece '", piece,
                             "' is missing; every piece belongs beside the checkpoint"));
    SafetensorsFile file = load_safetensors(piece, env);
    const auto& meta = file.metadata;
    if (piece_entry(piece, meta, "format") != kPieceFormat)
      piece_fail(piece, concat("not a checkpoint piece (format '",
                               piece_entry(piece, meta, "format"), "')"));
    const std::string problem = checkpoint_checksum_problem(file.tensors, meta);
    if (!problem.empty()) piece_fail(piece, problem);
    if (piece_number(piece, piece_entry(piece, meta, "piece"), "piece") != w ||
        piece_number(piece, piece_entry(piece, meta, kCheckpointPieces), "pieces") != pieces ||
        piece_number(piece, piece_entry(piece, meta, "step"), "step") != step)
      piece_fail(piece, concat("it is piece ", piece_entry(piece, meta, "piece"), " of ",
                               piece_entry(piece, meta, kCheckpointPieces),
                               " of the checkpoint of step ", piece_entry(piece, meta, "step"),
                               ", not piece ", w, " of ", pieces, " of step ", step));
    for (auto& [name, t] : file.tensors) add_range(piece, name, t, meta, wholes[name]);
  }
  for (auto& [name, whole] : wholes) {
    check_covered(path, name, whole);
    if (tensors.count(name) != 0)
      throw DataError(concat("checkpoint '", path, "': tensor '", name,
                             "' is both in the checkpoint's file and in its pieces"));
    tensors[name] = std::move(whole.values);
  }
}

}  // namespace dist::detail
