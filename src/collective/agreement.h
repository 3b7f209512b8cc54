// The agreement before each collective (ProcessGroupSpec::check_collectives), over any
// transport: the members compare what they are about to issue (fingerprint.h) in one small
// all-reduce whose size and operation are the same for every collective, so members that
// diverge get a CollectiveError naming what each issued instead of a transport that aborts the
// process on the first message of the wrong size (Gloo does).
//
// The cost is one round trip of 320 bytes per collective. A small sum of integers (at most
// kAgreementPayload values: a step's agreement on data, any_worker, counts) travels inside its
// own agreement, so it costs that one round trip and no second one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "collective/fingerprint.h"
#include "collective/process_group_spec.h"
#include "collective/transport.h"

namespace dist::collective {

// How many int64 values an agreement carries and sums.
constexpr int64_t kAgreementPayload = 8;

// One collective's agreement. Its all-reduce is a SUM, as is every agreement's: equal fields are
// told from unequal ones by the sums of their 16-bit pieces and of those pieces' squares (for
// integers x_1..x_n, sum(x) = n x_i and sum(x^2) = n x_i^2 hold only if every x equals x_i), so
// every member reaches the same verdict.
class Agreement {
 public:
  // `payload`: at most kAgreementPayload int64 values to sum over the members, or undefined.
  Agreement(int64_t sequence, const Fingerprint& mine, const at::Tensor& payload = {});

  // Starts the agreement's all-reduce; throws what the transport throws.
  WorkHandle start(Transport& transport);
  // Once the work completed: empty when every member of `spec` issued the same collective;
  // otherwise the message that names what each issued (every member computes the same one,
  // gathering what each issued over `transport`).
  std::string disagreement(Transport& transport, const ProcessGroupSpec& spec) const;
  // Once agreed: the payload summed over the members.
  at::Tensor payload_sum() const;

 private:
  int64_t sequence_;
  Fingerprint mine_;
  std::vector<int64_t> pieces_;  // mine_ in 16-bit pieces, as sent
  int64_t payload_size_ = 0;
  at::Tensor message_;  // pieces, their squares, payload (summed in place)
};

// The agreement without a payload, from start to verdict.
std::string disagreement(Transport& transport, const ProcessGroupSpec& spec, int64_t sequence,
                         const Fingerprint& mine);

}  // namespace dist::collective
