// HostSharedVariables: values (a parameter with a replica's alias, a slot) moved into one copy
// that every worker maps, found there again, moved out again. Workers are threads here, each
// with its own tensors and its own mapping; tests/multi_worker runs the whole step between
// processes (WorkersSharingVariablesTrainTheSameBitsAsPrivateCopies).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "../collective/collective_test_util.h"
#include "distribute/step/host_shared_variables.h"

namespace dist {
namespace {

using collective::testing::run_threads;
using collective::testing::same_host_group;

struct WorkerValues {
  at::Tensor param, alias, slot;
  std::vector<HostSharedVariables::Holders> values() const { return {{param, alias}, {slot}}; }
};

WorkerValues make_values() {
  WorkerValues w;
  w.param = at::arange(1000, at::kFloat).set_requires_grad(true);
  w.param.mutable_grad() = at::full({1000}, 0.5f);
  w.alias = at::empty({0});
  {
    torch::NoGradGuard no_grad;
    w.alias.set_data(w.param);  // a replica's copy: its own tensor, the parameter's storage
  }
  w.slot = at::arange(1000, at::kDouble) * 2;
  return w;
}

TEST(HostSharedVariablesTest, SharedValuesAreOneCopyAndUnsharedOnesKeepTheirValues) {
  auto members = same_host_group(2);
  std::vector<WorkerValues> workers(2);
  std::vector<HostSharedVariables> shared(2);
  run_threads(2, [&](int r) {
    auto& w = workers[static_cast<size_t>(r)];
    auto& host = shared[static_cast<size_t>(r)];
    auto& c = *members[static_cast<size_t>(r)];
    w = make_values();
    EXPECT_FALSE(host.holds(w.values()));
    ASSERT_TRUE(host.share(w.values(), c));
    EXPECT_TRUE(host.active());
    EXPECT_TRUE(host.holds(w.values()));
    EXPECT_EQ(w.alias.data_ptr(), w.param.data_ptr());  // still one storage per worker
    EXPECT_TRUE(w.param.requires_grad());
    EXPECT_TRUE(at::equal(w.param.grad(), at::full({1000}, 0.5f)));  // the gradient stays
    EXPECT_TRUE(at::equal(w.param, at::arange(1000, at::kFloat)));
    EXPECT_TRUE(at::equal(w.slot, at::arange(1000, at::kDouble) * 2));
    c.barrier()->wait();
    // Each worker updates its half in place; both see the whole.
    {
      torch::NoGradGuard no_grad;
      w.param.narrow(0, r * 500, 500).mul_(-1);
      w.slot.narrow(0, r * 500, 500).add_(1);
    }
    c.barrier()->wait();
    EXPECT_TRUE(at::equal(w.param, -at::arange(1000, at::kFloat)));
    EXPECT_TRUE(at::equal(w.alias, -at::arange(1000, at::kFloat)));
    EXPECT_TRUE(at::equal(w.slot, at::arange(1000, at::kDouble) * 2 + 1));
    c.barrier()->wait();

    // A slot given new storage (as a restored checkpoint gives it) is no longer held.
    const at::Tensor restored = w.slot.clone();
    EXPECT_FALSE(host.holds({{w.param, w.alias}, {restored}}));

    host.unshare(w.values());
    EXPECT_FALSE(host.active());
    EXPECT_FALSE(host.holds(w.values()));
    EXPECT_EQ(w.alias.data_ptr(), w.param.data_ptr());
    c.barrier()->wait();
    {
      torch::NoGradGuard no_grad;
      w.param.add_(r);  // private again: the other worker does not see it
    }
    c.barrier()->wait();
    EXPECT_TRUE(at::equal(w.param, -at::arange(1000, at::kFloat) + r));
    EXPECT_TRUE(at::equal(w.slot, at::arange(1000, at::kDouble) * 2 + 1));
  });
  for (size_t p = members.size(); p-- > 0;) members[p].reset();
}

TEST(HostSharedVariablesTest, WorkersThatCannotShareMemoryMoveNothing) {
  auto members = same_host_group(2, std::chrono::seconds(30), /*shared_memory=*/false);
  run_threads(2, [&](int r) {
    WorkerValues w = make_values();
    const void* before = w.param.data_ptr();
    HostSharedVariables host;
    EXPECT_FALSE(host.share(w.values(), *members[static_cast<size_t>(r)]));
    EXPECT_FALSE(host.active());
    EXPECT_EQ(w.param.data_ptr(), before);
  });
  for (size_t p = members.size(); p-- > 0;) members[p].reset();
}

}  // namespace
}  // namespace dist
