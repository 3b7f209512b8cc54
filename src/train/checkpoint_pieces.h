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
//                              named T; metadata "begin/T" (the range's first element),
//                              "shape/T" (T's whole shape, "6,8"; "" for a step counter, which
//                              every piece holds whole), "piece" = w, "pieces" = N, "step" (the
//                              checkpoint's), format "dist.checkpoint.piece/1", and a
//                              checkpoint's checksums.
//
// A reader puts the ranges of every piece back together, whole, and checks that they cover each
// tensor's elements exactly once: any strategy and worker count reads the pieces of any other.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/core/env.h"

namespace dist::detail {

inline constexpr char kCheckpointPieces[] = "pieces";

std::string checkpoint_piece_path(const std::string& path, int piece, int pieces);
// Whether the file named `name` is a piece of the checkpoint file named `checkpoint` (names in
// one directory).
bool is_checkpoint_piece(const std::string& name, const std::string& checkpoint);

// A range of one tensor's flat elements.
struct PieceTensor {
  std::string name;
  int64_t begin = 0;
  std::vector<int64_t> shape;  // the whole tensor's; empty: a step counter, held whole
  at::Tensor values;           // 1-D, or the counter
};

// Writes piece `piece` of `pieces` of the checkpoint at `path` (of step `step`) atomically.
void write_checkpoint_piece(const std::string& path, int piece, int pieces, int64_t step,
                            const std::vector<PieceTensor>& tensors, Env* env);

// Reads the `pieces` pieces of the checkpoint at `path` (of step `step`), checks each (format,
// checksums, that it is piece w of this checkpoint) and that together they cover every
// element of every tensor once, and adds each tensor, whole, to `tensors` (a step counter: the
// largest of the pieces'). DataError naming the piece and the tensor otherwise.
void read_checkpoint_pieces(const std::string& path, int pieces, int64_t step, Env* env,
                            std::map<std::string, at::Tensor>& tensors);

}  // namespace dist::detail
