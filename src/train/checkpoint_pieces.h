// A checkpoint written in pieces (dist/train/checkpoint.h). When a strategy keeps the
// parameters in shares (Sharding::kParameters: 1/N of each parameter and of its optimizer slots
// on each of N workers), every worker writes its own shares to a piece beside the checkpoint,
// so that no worker ever holds the whole state:
//
//   <path>                     the checkpoint's file, with everything else (buffers, tensors,
//                              learning rates, hooks, the random state); metadata "pieces" = N
//   <path>.piece-<w>-of-<N>    worker w's shares: for each tensor T of the checkpoint's naming
//                              ("<model>/<parameter>", "<optimizer>/<parameter>/<slot>") the
//                              range of T's flat elements that worker w keeps, as a 1-D tensor
//                              named T; metadata "begin/T" (the range's first element) and
//                              "shape/T" (T's whole shape, "6,8"; "" for a 0-dim tensor), except
//                              for a step counter, which every piece holds whole (no "begin/T");
//                              "piece" = w, "pieces" = N, "step" (the checkpoint's), "pieces.save"
//                              (an id the workers drew together for this save, also in <path>, so
//                              that the pieces of two saves of one step never mix), format
//                              "dist.checkpoint.piece/1", and a checkpoint's checksums.
//
// A reader puts the ranges of every piece back together, whole, or, where it keeps only a range
// of a tensor (a worker at Sharding::kParameters), only that range, and checks that they cover
// each tensor's elements exactly once: any strategy and worker count reads the pieces of any
// other.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/core/env.h"
#include "train/sealed_file.h"

namespace dist::detail {

inline constexpr char kCheckpointPieces[] = "pieces";
inline constexpr char kCheckpointSave[] = "pieces.save";

// Which save a piece belongs to.
struct PiecesOf {
  int pieces = 0;
  int64_t step = 0;
  std::string save;
};

std::string checkpoint_piece_path(const std::string& path, int piece, int pieces);
// Whether the file named `name` is a piece of the checkpoint file named `checkpoint` (names in
// one directory).
bool is_checkpoint_piece(const std::string& name, const std::string& checkpoint);

// A range of one tensor's flat elements, or a step counter held whole.
struct PieceTensor {
  std::string name;
  int64_t begin = 0;
  std::vector<int64_t> shape;  // the whole tensor's
  at::Tensor values;           // 1-D, or the counter
  bool whole = false;          // a step counter: every piece holds it whole
};

// Writes piece `piece` of the save `of` of the checkpoint at `path`, atomically.
void write_checkpoint_piece(const std::string& path, const PiecesOf& of, int piece,
                            const std::vector<PieceTensor>& tensors, Env* env);

// Reads the pieces of the save `of` of the checkpoint at `path`, checks each (format,
// checksums, that it is piece w of this save, ranges that fit) and that together they cover
// every element of every tensor exactly once, and adds each tensor to `tensors`: whole, or the
// range `wanted` names of it (then its whole shape too), a step counter the largest of the
// pieces'. A tensor read as a range passes through a bounded buffer, never whole. Allocates no
// tensor larger than all pieces together. DataError naming the piece and the tensor otherwise.
void read_checkpoint_pieces(const std::string& path, const PiecesOf& of, Env* env,
                            const WantedRanges& wanted, CheckedTensors& tensors);

}  // namespace dist::detail
