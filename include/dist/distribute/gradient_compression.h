// Built-in communication hooks (communication_hook.h): gradients compressed on their way
// between the worker processes.
//
//   bf16     every pack crosses as bfloat16: half the bytes, float32's range;
//   fp16     as float16, scaled so that no gradient overflows: half the bytes, 3 more bits
//            of precision than bfloat16 where the scale fits;
//   powersgd a rank-r approximation of every large matrix (Vogels et al. 2019, "PowerSGD"):
//            n x m gradients cross as (n + m) x r numbers.
//
// What holds (docs/design.md, "Gradient compression"):
//   bf16, fp16: each process cuts the pack into one chunk per process, compresses the chunk
//     for process q (fp16: times a power of two, the largest that keeps the chunk's largest
//     magnitude within float16's range, sent along) and sends it there; process q decompresses
//     the chunks it receives and adds them in float32 in process order (0, 1, ...), compresses
//     the sum the same way, and sends it to every process, which decompresses it. So the
//     result is round(sum over p of round(g_p)), defined for any number of processes,
//     deterministic run to run, and every process ends with the same bits. Bytes sent per
//     process: 2(N-1)/N of the pack in 16 bits, half of a float32 ring all-reduce.
//   powersgd: per pack, 1-D tensors and matrices too small to gain (n*m <= 2(n+m)r) are summed
//     uncompressed; every other gradient, seen as an n x m matrix G (first dimension by the
//     rest), is approximated: M = G + E (E: this process's error feedback), P = sum of M Q
//     over processes, P orthonormalized (Gram-Schmidt), Q = sum of M^T P, result P Q^T (the
//     approximation of the sum of every process's M), E = M - result / N. Q starts from a
//     seeded normal draw (identical on every process) and is kept from step to step (warm
//     start). Deterministic for a seed; E, Q and the hook's step count are its state(), so a
//     run resumed from a checkpoint that holds them equals an uninterrupted one bit for bit.
//     The first `start_step` steps (of each pack) are summed uncompressed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dist/distribute/communication_hook.h"

namespace dist {

std::shared_ptr<CommunicationHook> bf16_compression();
std::shared_ptr<CommunicationHook> fp16_compression();

struct PowerSgdOptions {
  int rank = 4;             // r: the approximation's rank
  int64_t start_step = 10;  // plain steps before compression starts
  bool error_feedback = true;
  bool warm_start = true;  // keep Q from step to step (else a fresh draw every step)
  uint64_t seed = 0;       // of Q's first draw; the same on every process
};
// One per strategy: its state is kept per model and pack (a second strategy's packs are an
// InvalidArgument). load_state() between steps only.
std::shared_ptr<CommunicationHook> powersgd(PowerSgdOptions options = {});

// By name, as dist-train's --gradient-compression takes it: "none" (null: plain all-reduce),
// "bf16", "fp16", "powersgd:RANK" or "powersgd:RANK:START_STEP". InvalidArgument naming the
// text and the accepted forms otherwise.
std::shared_ptr<CommunicationHook> gradient_compression(const std::string& spec);

}  // namespace dist
