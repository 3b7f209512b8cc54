// Built-in communication hooks (communication_hook.h): gradients compressed on their way
// between the worker processes.
//
//   bf16     every pack crosses as bfloat16: half the bytes, float32's range;
//   fp16     as float16, scaled so that no gradient overflows: half the bytes, 3 more bits
//            of precision than bfloat16 where the scale fits;
//   powersgd a rank-r approximation of every large matrix (Vogels et al. 2019, "PowerSGD"):
//            n x m gradients cross as (n + m) x r numbers, the first `start_step` steps of
//            each pack uncompressed.
//
// Every one is deterministic (powersgd for a seed) and leaves every process with the same
// bits; powersgd's error feedback and warm start are its state(), so a run resumed from a
// checkpoint that holds them equals an uninterrupted one bit for bit. The algorithms, their
// sums and bytes: docs/design.md, "Gradient compression: communication hooks".
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
