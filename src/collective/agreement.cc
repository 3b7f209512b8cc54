#include "collective/agreement.h"

#include <ATen/ATen.h>

#include "dist/core/error.h"

namespace dist::collective {
namespace {

constexpr int64_t kFields = 4;
constexpr int64_t kPiecesPerField = 4;  // 16 bits each
constexpr int64_t kPieces = kFields * kPiecesPerField;
constexpr int64_t kMessage = 2 * kPieces + kAgreementPayload;

std::vector<int64_t> fields_of(const Fingerprint& f) {
  return {f.kind, f.elements, f.dtype, f.tensors};
}

// The fields in 16-bit pieces: a piece's square, summed over up to 2^31 members, fits in int64.
std::vector<int64_t> pieces_of(const Fingerprint& f) {
  std::vector<int64_t> pieces;
  for (int64_t field : fields_of(f)) {
    const auto bits = static_cast<uint64_t>(field);
    for (int64_t p = 0; p < kPiecesPerField; ++p)
      pieces.push_back(static_cast<int64_t>((bits >> (16 * p)) & 0xFFFF));
  }
  return pieces;
}

}  // namespace

Agreement::Agreement(int64_t sequence, const Fingerprint& mine, const at::Tensor& payload)
    : sequence_(sequence), mine_(mine), pieces_(pieces_of(mine)) {
  if (payload.defined()) {
    DIST_INTERNAL_ASSERT(payload.scalar_type() == at::kLong && payload.dim() == 1 &&
                             payload.numel() <= kAgreementPayload,
                         "an agreement carries at most ", kAgreementPayload, " int64 values");
    payload_size_ = payload.numel();
  }
  message_ = at::zeros({kMessage}, at::kLong);
  auto m = message_.accessor<int64_t, 1>();
  for (int64_t i = 0; i < kPieces; ++i) {
    m[i] = pieces_[static_cast<size_t>(i)];
    m[kPieces + i] = m[i] * m[i];
  }
  if (payload_size_ > 0) message_.narrow(0, 2 * kPieces, payload_size_).copy_(payload);
}

WorkHandle Agreement::start(Transport& transport) {
  std::vector<at::Tensor> one{message_};
  return transport.all_reduce(one, ReduceOp::kSum);
}

std::string Agreement::disagreement(Transport& transport, const ProcessGroupSpec& spec) const {
  const int size = static_cast<int>(spec.members.size());
  auto m = message_.accessor<int64_t, 1>();
  bool same = true;
  for (int64_t i = 0; i < kPieces && same; ++i) {
    const int64_t piece = pieces_[static_cast<size_t>(i)];
    same = m[i] == size * piece && m[kPieces + i] == size * piece * piece;
  }
  if (same) return "";
  // Every member saw the disagreement (the same sums): gather what each issued, to name it.
  std::vector<at::Tensor> all;
  for (int r = 0; r < size; ++r) all.push_back(at::empty({kFields}, at::kLong));
  transport.all_gather(at::tensor(fields_of(mine_), at::kLong), &all)
      ->wait(spec.collective_timeout);
  std::string issued;
  for (int r = 0; r < size; ++r) {
    auto f = all[static_cast<size_t>(r)].accessor<int64_t, 1>();
    issued += detail::concat(r == 0 ? "" : ", ", member_name(spec, r), " issued ",
                             describe({f[0], f[1], f[2], f[3]}));
  }
  return detail::concat("collective mismatch at collective #", sequence_, ": ", issued,
                        "; the workers are running different steps (different settings, data or "
                        "code): start every worker with the same settings");
}

at::Tensor Agreement::payload_sum() const { return message_.narrow(0, 2 * kPieces, payload_size_); }

std::string disagreement(Transport& transport, const ProcessGroupSpec& spec, int64_t sequence,
                         const Fingerprint& mine) {
  Agreement agreement(sequence, mine);
  agreement.start(transport)->wait(spec.collective_timeout);
  return agreement.disagreement(transport, spec);
}

}  // namespace dist::collective
