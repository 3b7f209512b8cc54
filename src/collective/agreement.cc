#include "collective/agreement.h"

#include <ATen/ATen.h>

#include "dist/core/error.h"

namespace dist::collective {
namespace {

constexpr int64_t kFields = 4;

std::vector<int64_t> fields_of(const Fingerprint& f) {
  return {f.kind, f.elements, f.dtype, f.tensors};
}

// Whether every member has the same fields: MAX of (f, -f) gives every field's maximum and
// minimum in one small all-reduce.
bool all_equal(Transport& transport, const std::vector<int64_t>& fields,
               std::chrono::milliseconds timeout) {
  at::Tensor extremes = at::empty({2 * kFields}, at::kLong);
  for (int64_t i = 0; i < kFields; ++i) {
    extremes[i] = fields[static_cast<size_t>(i)];
    extremes[i + kFields] = -fields[static_cast<size_t>(i)];
  }
  std::vector<at::Tensor> one{extremes};
  transport.all_reduce(one, ReduceOp::kMax)->wait(timeout);
  auto e = extremes.accessor<int64_t, 1>();
  for (int64_t i = 0; i < kFields; ++i)
    if (e[i] != -e[i + kFields]) return false;
  return true;
}

}  // namespace

std::string disagreement(Transport& transport, const ProcessGroupSpec& spec, int64_t sequence,
                         const Fingerprint& mine) {
  const std::vector<int64_t> fields = fields_of(mine);
  if (all_equal(transport, fields, spec.collective_timeout)) return "";
  // Every member saw the disagreement (the same extremes): gather what each issued, to name it.
  const int size = static_cast<int>(spec.members.size());
  std::vector<at::Tensor> all;
  for (int r = 0; r < size; ++r) all.push_back(at::empty({kFields}, at::kLong));
  transport.all_gather(at::tensor(fields, at::kLong), &all)->wait(spec.collective_timeout);
  std::string issued;
  for (int r = 0; r < size; ++r) {
    auto f = all[static_cast<size_t>(r)].accessor<int64_t, 1>();
    issued += detail::concat(r == 0 ? "" : ", ", member_name(spec, r), " issued ",
                             describe({f[0], f[1], f[2], f[3]}));
  }
  return detail::concat("collective mismatch at collective #", sequence, ": ", issued,
                        "; the workers are running different steps (different settings, data or "
                        "code): start every worker with the same settings");
}

}  // namespace dist::collective
