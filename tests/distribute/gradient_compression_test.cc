// The communication hooks of gradient_compression.h, below the strategies: the 16-bit codec,
// the names dist-train takes, PendingWork, and each hook over real Gloo members on 127.0.0.1
// (threads of this test) against an explicit computation of what it must give.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>

#include "collective/collective_test_util.h"
#include "collective/communicator.h"
#include "collective/factory.h"
#include "dist/core/error.h"
#include "dist/distribute/gradient_compression.h"
#include "distribute/reduction/gradient_reducer.h"
#include "distribute/reduction/half_codec.h"

namespace dist {
namespace {

using collective::testing::gloo_group;
using collective::testing::release;
using collective::testing::run_threads;
using compression::HalfKind;

// ---- one process -----------------------------------------------------------------------------

TEST(GradientCompressionTest, Float16ScaleKeepsTheLargestMagnitudeInRange) {
  for (float largest : {1e-30f, 3e-5f, 1.0f, 65504.0f, 65505.0f, 1e6f, 3e38f}) {
    at::Tensor values = at::tensor({largest, -largest / 3, 0.0f});
    const int e = compression::float16_exponent(values);
    EXPECT_LE(std::ldexp(largest, e), 65504.0f) << largest;
    EXPECT_GT(std::ldexp(largest, e + 1), 65504.0f) << largest << ": a larger scale fits";
    at::Tensor back = at::empty_like(values);
    compression::decode(compression::encode(values, HalfKind::kFloat16), HalfKind::kFloat16, back);
    EXPECT_TRUE(at::isfinite(back).all().item<bool>()) << largest;
    EXPECT_NEAR(back[0].item<float>() / largest, 1.0f, 1e-3f) << largest;
  }
  EXPECT_EQ(compression::float16_exponent(at::zeros({4})), 0);
  EXPECT_EQ(compression::float16_exponent(at::tensor({1.0f, INFINITY})), 0);
}

// float16 goes through the CPU's F16C instructions where it has them: the bits must be ATen's
// (round to nearest even, subnormals kept), every element of a length that is not a multiple of
// the vector's, decoding and decoding into a sum alike.
TEST(GradientCompressionTest, Float16CodecGivesAtensBitsForEveryKindOfValue) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
  at::Tensor values = at::randn({1003}, generator) * 1e-3;
  values[0] = 0.0f;
  values[1] = -0.0f;
  values[2] = 1e-12f;  // float16 subnormals once scaled (by 2^22 here)
  values[3] = 3.0f * std::ldexp(1.0f, -40);
  values[1002] = 0.01f;  // the largest, in the tail
  const int e = compression::float16_exponent(values);
  const at::Tensor bytes = compression::encode(values, HalfKind::kFloat16);
  const at::Tensor halves = (values * std::ldexp(1.0f, e)).to(at::kHalf);
  EXPECT_TRUE(at::equal(bytes.view(at::kShort).narrow(0, 0, 1003), halves.view(at::kShort)));
  EXPECT_EQ(bytes.view(at::kShort)[1003].item<int16_t>(), e);
  const at::Tensor exact = halves.to(at::kFloat) * std::ldexp(1.0f, -e);
  at::Tensor back = at::empty({1003});
  compression::decode(bytes, HalfKind::kFloat16, back);
  EXPECT_TRUE(at::equal(back, exact));
  at::Tensor sum = at::randn({1003}, generator);
  const at::Tensor expected = sum + exact;
  compression::decode_add(bytes, HalfKind::kFloat16, sum);
  EXPECT_TRUE(at::equal(sum, expected));
}

TEST(GradientCompressionTest, Bfloat16EncodingRoundsToNearestAndTakesTwoBytesAValue) {
  at::Tensor values = at::randn({1001});
  at::Tensor bytes = compression::encode(values, HalfKind::kBFloat16);
  EXPECT_EQ(bytes.numel(), 2 * 1002);
  at::Tensor back = at::empty_like(values);
  compression::decode(bytes, HalfKind::kBFloat16, back);
  EXPECT_TRUE(at::equal(back, values.to(at::kBFloat16).to(at::kFloat)));
}

TEST(GradientCompressionTest, NamesAreParsedAndBadOnesNamed) {
  EXPECT_EQ(gradient_compression("none"), nullptr);
  EXPECT_EQ(gradient_compression("bf16")->name(), "bf16");
  EXPECT_EQ(gradient_compression("fp16")->name(), "fp16");
  EXPECT_EQ(gradient_compression("powersgd:4")->name(), "powersgd:4");
  EXPECT_EQ(gradient_compression("powersgd:2:0")->name(), "powersgd:2");
  for (const char* bad : {"", "bf", "powersgd", "powersgd:", "powersgd:0", "powersgd:-1",
                          "powersgd:4:x", "powersgd:4:", "powersgd:x", "int8"}) {
    try {
      gradient_compression(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("powersgd:RANK"), std::string::npos) << e.what();
    }
  }
}

TEST(GradientCompressionTest, PendingWorkFinishesOnceAndRethrowsItsFailure) {
  int runs = 0;
  PendingWork work([&] { ++runs; });
  work.wait();
  PendingWork copy = work;
  copy.wait();
  EXPECT_EQ(runs, 1);
  PendingWork failing([] { throw DataError("no data"); });
  EXPECT_THROW(failing.wait(), DataError);
  EXPECT_THROW(failing.wait(), DataError);
  PendingWork().wait();  // already done
}

// ---- over Gloo members -------------------------------------------------------------------------

// A pack of `shapes`, its values a seeded draw for `member` (so every member knows them all).
GradientPack pack_of(const std::vector<std::vector<int64_t>>& shapes, int member, int step,
                     size_t index = 0) {
  int64_t elements = 0;
  for (const auto& s : shapes) elements += at::empty(s).numel();
  GradientPack pack;
  pack.index = index;
  pack.step = step;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(1000 * member + step);
  pack.buffer = at::randn({elements}, generator) * 100;
  int64_t at = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const int64_t n = at::empty(shapes[i]).numel();
    pack.gradients.push_back(pack.buffer.narrow(0, at, n).view(shapes[i]));
    pack.names.push_back("p" + std::to_string(i));
    at += n;
  }
  return pack;
}

at::Tensor round_to(const at::Tensor& values, HalfKind kind, int exponent) {
  const at::ScalarType dtype = kind == HalfKind::kBFloat16 ? at::kBFloat16 : at::kHalf;
  return (values * std::ldexp(1.0f, exponent)).to(dtype).to(at::kFloat) *
         std::ldexp(1.0f, -exponent);
}

// What gradient_compression.h promises, computed here: per chunk c (chunk_range), the
// contributions rounded with their own scale, added in member order in float32, the sum rounded
// again with its own.
at::Tensor expected_half_sum(const std::vector<at::Tensor>& buffers, HalfKind kind) {
  const int members = static_cast<int>(buffers.size());
  at::Tensor result = at::empty_like(buffers[0]);
  for (int c = 0; c < members; ++c) {
    const auto [begin, end] = collective::chunk_range(buffers[0].numel(), members, c);
    at::Tensor sum;
    for (int p = 0; p < members; ++p) {
      at::Tensor chunk = buffers[static_cast<size_t>(p)].slice(0, begin, end);
      const int e = kind == HalfKind::kFloat16 ? compression::float16_exponent(chunk) : 0;
      at::Tensor rounded = round_to(chunk, kind, e);
      sum = p == 0 ? rounded : sum + rounded;
    }
    const int e = kind == HalfKind::kFloat16 ? compression::float16_exponent(sum) : 0;
    result.slice(0, begin, end).copy_(round_to(sum, kind, e));
  }
  return result;
}

class HalfSumTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(HalfSumTest, EveryMemberGetsTheExplicitCompressedSumBitForBit) {
  const auto [name, members] = GetParam();
  const HalfKind kind = name == "bf16" ? HalfKind::kBFloat16 : HalfKind::kFloat16;
  auto group = gloo_group(members);
  // Sizes that split unevenly, one smaller than the group, a matrix, two packs in flight.
  // The last pack's messages are larger than a piece (1 MiB) for 2 and 3 members. Step 1 runs
  // in the buffers step 0 left (kept from step to step).
  const std::vector<std::vector<std::vector<int64_t>>> packs{
      {{1}}, {{7}, {3, 5}}, {{1000}}, {{2200, 1000}}};
  PackCommunication communicate = communicate_through(gradient_compression(name));
  run_threads(members, [&](int m) {
    for (int step = 0; step < 2; ++step) {
      std::vector<GradientPack> mine;
      std::vector<collective::WorkHandle> works;
      for (size_t k = 0; k < packs.size(); ++k) mine.push_back(pack_of(packs[k], m, step, k));
      for (auto& pack : mine) works.push_back(communicate(*group[static_cast<size_t>(m)], pack));
      for (size_t k = 0; k < packs.size(); ++k) {
        works[k]->wait();
        std::vector<at::Tensor> everyone;
        for (int p = 0; p < members; ++p) everyone.push_back(pack_of(packs[k], p, step).buffer);
        EXPECT_TRUE(at::equal(mine[k].buffer, expected_half_sum(everyone, kind)))
            << name << ", member " << m << ", pack " << k << ", step " << step;
      }
    }
  });
  release(group);
}

INSTANTIATE_TEST_SUITE_P(GradientCompressionGloo, HalfSumTest,
                         ::testing::Combine(::testing::Values("bf16", "fp16"),
                                            ::testing::Values(1, 2, 3)));

TEST(GradientCompressionGlooTest, Float16NeverOverflowsWhereFloat16ItselfWould) {
  auto group = gloo_group(2);
  PackCommunication communicate = communicate_through(fp16_compression());
  run_threads(2, [&](int m) {
    GradientPack pack = pack_of({{64}}, m, 0);
    pack.buffer.mul_(1e4);  // sums of up to 1e7: float16 alone tops out at 65504
    const at::Tensor exact =
        pack_of({{64}}, 0, 0).buffer * 1e4 + pack_of({{64}}, 1, 0).buffer * 1e4;
    communicate(*group[static_cast<size_t>(m)], pack)->wait();
    EXPECT_TRUE(at::isfinite(pack.buffer).all().item<bool>());
    // Two roundings to 11 bits, each relative to its chunk's largest magnitude.
    const double tolerance = 2e-3 * exact.abs().max().item<double>();
    EXPECT_LT((pack.buffer - exact).abs().max().item<double>(), tolerance);
  });
  release(group);
}

// Compression only where it pays: a pack below the threshold crosses as one all-reduce in
// float32 (the exact sum of two members), one at or above it through the hook (rounded). -1
// takes the hook's own threshold: PowerSGD 1 MiB, the 16-bit hooks none.
TEST(GradientCompressionGlooTest, PacksBelowTheThresholdCrossUncompressed) {
  EXPECT_EQ(gradient_compression("powersgd:4")->min_pack_bytes(), int64_t{1} << 20);
  EXPECT_EQ(gradient_compression("bf16")->min_pack_bytes(), 0);
  auto group = gloo_group(2);
  const std::vector<std::vector<int64_t>> small{{64, 64}};  // 16 KiB
  const at::Tensor exact = pack_of(small, 0, 0).buffer + pack_of(small, 1, 0).buffer;
  struct Case {
    std::string compression;
    int64_t min_bytes;
    bool compressed;
  };
  for (const Case& c :
       {Case{"powersgd:1:0", -1, false}, Case{"powersgd:1:0", 0, true}, Case{"bf16", -1, true},
        Case{"bf16", 16 * 1024, true}, Case{"bf16", 16 * 1024 + 1, false}}) {
    run_threads(2, [&](int m) {
      // A hook per member: a PowerSGD hook serves one strategy (one process) only.
      PackCommunication communicate =
          communicate_through(gradient_compression(c.compression), c.min_bytes);
      GradientPack pack = pack_of(small, m, 0);
      communicate(*group[static_cast<size_t>(m)], pack)->wait();
      EXPECT_EQ(at::equal(pack.buffer, exact), !c.compressed)
          << c.compression << " from " << c.min_bytes << " bytes, member " << m;
    });
  }
  release(group);
}

// PowerSGD: what the options say, run on `members` Gloo members for `steps` steps.
struct PowerSgdRun {
  std::vector<std::vector<at::Tensor>> results;  // [member][step]: the pack's buffer
  std::vector<std::map<std::string, at::Tensor>> states;
};

const std::vector<std::vector<int64_t>> kPowerSgdShapes{{40, 30}, {30}, {4, 3}, {20, 2, 5}};

PowerSgdRun run_powersgd(int members, int steps, PowerSgdOptions options,
                         const std::vector<std::map<std::string, at::Tensor>>& resume = {},
                         int first_step = 0) {
  auto group = gloo_group(members);
  PowerSgdRun run;
  run.results.resize(static_cast<size_t>(members));
  run.states.resize(static_cast<size_t>(members));
  std::vector<std::shared_ptr<CommunicationHook>> hooks;
  for (int m = 0; m < members; ++m) {
    hooks.push_back(powersgd(options));
    if (!resume.empty()) hooks.back()->load_state(resume[static_cast<size_t>(m)]);
  }
  run_threads(members, [&](int m) {
    PackCommunication communicate = communicate_through(hooks[static_cast<size_t>(m)]);
    for (int step = first_step; step < first_step + steps; ++step) {
      GradientPack pack = pack_of(kPowerSgdShapes, m, step);
      communicate(*group[static_cast<size_t>(m)], pack)->wait();
      run.results[static_cast<size_t>(m)].push_back(pack.buffer.clone());
    }
    run.states[static_cast<size_t>(m)] = hooks[static_cast<size_t>(m)]->state();
  });
  release(group);
  return run;
}

TEST(GradientCompressionGlooTest, PowerSgdIsDeterministicIdenticalEverywhereAndResumesBitForBit) {
  PowerSgdOptions options;
  options.rank = 2;
  options.start_step = 1;
  const PowerSgdRun whole = run_powersgd(2, 5, options);
  const PowerSgdRun again = run_powersgd(2, 5, options);
  const PowerSgdRun first = run_powersgd(2, 2, options);
  const PowerSgdRun rest = run_powersgd(2, 3, options, first.states, 2);
  for (size_t step = 0; step < 5; ++step) {
    EXPECT_TRUE(at::equal(whole.results[0][step], whole.results[1][step])) << "step " << step;
    EXPECT_TRUE(at::equal(whole.results[0][step], again.results[0][step])) << "step " << step;
    const at::Tensor& resumed = step < 2 ? first.results[0][step] : rest.results[0][step - 2];
    EXPECT_TRUE(at::equal(whole.results[0][step], resumed)) << "step " << step;
  }
  // The plain step is the exact sum; the compressed ones are not.
  const at::Tensor exact =
      pack_of(kPowerSgdShapes, 0, 0).buffer + pack_of(kPowerSgdShapes, 1, 0).buffer;
  EXPECT_TRUE(at::equal(whole.results[0][0], exact));
  const at::Tensor exact1 =
      pack_of(kPowerSgdShapes, 0, 1).buffer + pack_of(kPowerSgdShapes, 1, 1).buffer;
  EXPECT_FALSE(at::allclose(whole.results[0][1], exact1));
  // Without the saved state the resumed run differs (error feedback and warm start matter).
  const PowerSgdRun cold = run_powersgd(2, 3, options, {}, 2);
  EXPECT_FALSE(at::equal(cold.results[0][0], whole.results[0][2]));
}

TEST(GradientCompressionGlooTest, PowerSgdPassesVectorsAndSmallMatricesAndApproximatesTheRest) {
  PowerSgdOptions options;
  options.rank = 2;
  options.start_step = 0;
  const PowerSgdRun run = run_powersgd(2, 1, options);
  at::Tensor exact = pack_of(kPowerSgdShapes, 0, 0).buffer + pack_of(kPowerSgdShapes, 1, 0).buffer;
  const at::Tensor& got = run.results[0][0];
  // {30} and {4, 3} (12 <= 2 x (4 + 3) x 2) cross exactly: elements 1200..1242.
  EXPECT_TRUE(at::equal(got.slice(0, 1200, 1242), exact.slice(0, 1200, 1242)));
  // {40, 30} is approximated at rank 2: P Q^T with P's 2 columns orthonormal spans what the
  // result holds, so the result has rank 2 at most.
  const at::Tensor matrix = got.slice(0, 0, 1200).view({40, 30});
  const at::Tensor singular = at::linalg_svdvals(matrix);
  EXPECT_LT(singular[2].item<float>(), 1e-5f * singular[0].item<float>()) << singular;
  EXPECT_FALSE(at::allclose(matrix, exact.slice(0, 0, 1200).view({40, 30})));
  // The error feedback holds what the approximation left: M - result / N per member.
  const at::Tensor error = run.states[0].at("model0/pack0/error/p0");
  const at::Tensor m0 = pack_of(kPowerSgdShapes, 0, 0).buffer.slice(0, 0, 1200).view({40, 30});
  EXPECT_TRUE(at::allclose(error, m0 - matrix / 2, 1e-5, 1e-4));
  EXPECT_EQ(run.states[0].count("model0/pack0/error/p1"), 0u) << "a vector has no error feedback";
}

TEST(GradientCompressionTest, PowerSgdStateOfAnotherModelIsRefusedByName) {
  auto hook = powersgd({2, 0});
  hook->load_state({{"model0/pack0/error/p0", at::zeros({3, 3})},
                    {"model0/pack0/steps", at::tensor({int64_t{4}})}});
  auto alone = collective::make_single_process_communicator();
  GradientPack pack = pack_of(kPowerSgdShapes, 0, 0);
  try {
    communicate_through(hook)(*alone, pack)->wait();
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'p0'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(hook->load_state({{"weights", at::zeros({1})}}), InvalidArgument);
}

TEST(GradientCompressionTest, APowerSgdHookServesOneStrategyOnly) {
  auto hook = powersgd({2, 0});
  PackCommunication first = communicate_through(hook), second = communicate_through(hook);
  auto one = collective::make_single_process_communicator();
  auto other = collective::make_single_process_communicator();
  GradientPack pack = pack_of(kPowerSgdShapes, 0, 0);
  first(*one, pack)->wait();
  first(*one, pack)->wait();  // the same strategy again: fine
  try {
    second(*other, pack)->wait();
    ADD_FAILURE() << "a second strategy's pack was taken for the first's";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("PowerSGD hook of its own"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dist
