// Scripted forwards of any signature (dist/models/torchscript_signature.h): modules written by
// Python (DIST_TORCH_PYTHON, the version of this LibTorch) once per suite, called with named
// and positional tensors, a dict argument, optional and defaulted arguments; their outputs;
// the start-up check's description and its refusals, each naming what was wrong.
#include "dist/models/torchscript_signature.h"

#include <gmock/gmock-matchers.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>

#include "dist/core/error.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "multi_worker/process_group.h"
#include "test_util.h"

namespace dist::models {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing::message_of;

// Each module has one parameter w = 3 (load_torchscript wants something to train).
constexpr const char* kWriter = R"(
import sys
from typing import Dict, List, Optional, Tuple
import torch
from torch import Tensor, nn

class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(3.0))
    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        return self.w * tokens.float() + mask.float()

class DictInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(3.0))
    def forward(self, batch: Dict[str, Tensor]) -> Dict[str, Tensor]:
        total = torch.zeros(1)
        for key in sorted(batch.keys()):
            total = total * 10 + batch[key].sum()
        return {"logits": batch["a"] * self.w, "total": total, "count": torch.tensor(len(batch))}

class Optionals(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(3.0))
    def forward(self, x: Tensor, mask: Optional[Tensor] = None,
                scale: float = 2.0) -> Tuple[Tensor, Tensor]:
        y = self.w * x * scale
        if mask is None:
            return y, torch.zeros(0)
        return y, y * mask

class NeedsInt(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(3.0))
    def forward(self, x: Tensor, k: int) -> Tensor:
        return self.w * x * k

class ReturnsList(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(3.0))
    def forward(self, x: Tensor) -> List[Tensor]:
        return [self.w * x]

class Raises(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(3.0))
        self.bn = nn.BatchNorm1d(3)
    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 2:
            raise ValueError("x must be 2-D, one row per example")
        return self.bn(x) * self.w

out = sys.argv[1]
for name, module in [("two_inputs", TwoInputs()), ("dict_input", DictInput()),
                     ("optionals", Optionals()), ("needs_int", NeedsInt()),
                     ("returns_list", ReturnsList()), ("raises", Raises())]:
    torch.jit.script(module).save(f"{out}/{name}.pt")
)";

class TorchScriptSignatureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    testing::write_file(dir_->file("writer.py"), kWriter);
    testing::WorkerProcesses python;
    python.start(DIST_TORCH_PYTHON, {dir_->file("writer.py"), dir_->path()}, {});
    const testing::ProcessResult result = python.wait_all(120s).at(0);
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static TorchScriptModule load(const std::string& name) {
    return load_torchscript(dir_->file(name + ".pt"));
  }
  static testing::TempDir* dir_;
};
testing::TempDir* TorchScriptSignatureTest::dir_ = nullptr;

at::Tensor tokens() {
  return torch::tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6}).reshape({2, 3});
}
at::Tensor mask() { return torch::tensor(std::vector<float>{1, 1, 0, 1, 0, 0}).reshape({2, 3}); }

TEST_F(TorchScriptSignatureTest, TheSignatureIsReadFromTheSchema) {
  EXPECT_EQ(forward_signature(*load("two_inputs")).to_string(),
            "forward(tokens: Tensor, mask: Tensor) -> Tensor");
  EXPECT_EQ(forward_signature(*load("optionals")).to_string(),
            "forward(x: Tensor, mask: Optional[Tensor] = ..., scale: float = ...) -> "
            "Tuple[Tensor, Tensor]");
  const ForwardSignature dict = forward_signature(*load("dict_input"));
  ASSERT_EQ(dict.arguments.size(), 1u);
  EXPECT_EQ(dict.arguments[0].name, "batch");
  EXPECT_EQ(dict.arguments[0].type, "Dict[str, Tensor]");
  EXPECT_FALSE(dict.arguments[0].has_default);
  EXPECT_EQ(dict.returns, "Dict[str, Tensor]");
}

TEST_F(TorchScriptSignatureTest, NamedInputsBindByNameAndExtraOnesAreLeftOut) {
  auto model = load("two_inputs");
  const at::Tensor expected = 3 * tokens().to(torch::kFloat) + mask();
  const NamedTensors inputs{{"mask", mask()}, {"tokens", tokens()}, {"targets", tokens()}};
  EXPECT_TRUE(torch::equal(forward_tensor(*model, inputs), expected));
  // By position: tokens first, as the signature says.
  EXPECT_TRUE(
      torch::equal(forward_tensor(*model, std::vector<at::Tensor>{tokens(), mask()}), expected));
  // Autograd reaches the scripted parameter.
  forward_tensor(*model, inputs).sum().backward();
  EXPECT_FLOAT_EQ(model->named_parameters()["w"].grad().item<float>(),
                  tokens().sum().item<float>());
}

// A dataset's element: by name when named (the targets beside the inputs are left out), by
// position when not.
TEST_F(TorchScriptSignatureTest, AnElementBindsByItsNamesOrByPosition) {
  auto model = load("two_inputs");
  const at::Tensor expected = 3 * tokens().to(torch::kFloat) + mask();
  const data::Element named{{"targets", tokens()}, {"mask", mask()}, {"tokens", tokens()}};
  EXPECT_TRUE(torch::equal(forward_tensor(*model, named), expected));
  EXPECT_THAT(check_forward(*model, named).description,
              HasSubstr("called with mask = a tensor of shape [2, 3] and dtype Float, targets = "));
  EXPECT_THAT(check_forward(*model, named).description,
              HasSubstr("and dtype Long (no argument takes targets); it returned a tensor"));
  const data::Element positional{tokens(), mask()};
  EXPECT_TRUE(torch::equal(call_forward(*model, positional).toTensor(), expected));
  EXPECT_EQ(named_tensors(named).size(), 3u);
  EXPECT_THAT(message_of<InvalidArgument>([&] { named_tensors(positional); }),
              HasSubstr("has no names, only positions"));
}

TEST_F(TorchScriptSignatureTest, ADictArgumentTakesEveryInputKeyedAsGiven) {
  auto model = load("dict_input");
  const NamedTensors inputs{{"a", torch::tensor({1.0f, 2.0f})}, {"b", torch::tensor({4.0f})}};
  const NamedTensors outputs = output_tensors(call_forward(*model, inputs));
  ASSERT_EQ(outputs.size(), 3u);
  EXPECT_TRUE(torch::equal(outputs.at("logits"), torch::tensor({3.0f, 6.0f})));
  EXPECT_EQ(outputs.at("total").item<float>(), 34.0f);  // a's sum 3, then b's 4
  EXPECT_EQ(outputs.at("count").item<int64_t>(), 2);
  EXPECT_TRUE(torch::equal(forward_tensor(*model, inputs, "logits"), outputs.at("logits")));
}

TEST_F(TorchScriptSignatureTest, OptionalAndDefaultedArgumentsKeepTheirDefaults) {
  auto model = load("optionals");
  const at::Tensor x = torch::tensor({1.0f, 2.0f});
  NamedTensors outputs = output_tensors(call_forward(*model, NamedTensors{{"x", x}}));
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_TRUE(torch::equal(outputs.at("0"), torch::tensor({6.0f, 12.0f})));  // scale 2
  EXPECT_EQ(outputs.at("1").numel(), 0);                                     // mask None
  outputs = output_tensors(
      call_forward(*model, NamedTensors{{"x", x}, {"mask", torch::tensor({0.0f, 1.0f})}}));
  EXPECT_TRUE(torch::equal(outputs.at("1"), torch::tensor({0.0f, 12.0f})));
  EXPECT_TRUE(torch::equal(forward_tensor(*model, std::vector<at::Tensor>{x}, "0"),
                           torch::tensor({6.0f, 12.0f})));
  EXPECT_THAT(message_of<InvalidArgument>([&] {
                forward_tensor(*model, NamedTensors{{"x", x}});
              }),
              HasSubstr("returned a tuple of 2 (Tensor, Tensor); name the output to take"));
  EXPECT_THAT(message_of<InvalidArgument>([&] {
                forward_tensor(*model, NamedTensors{{"x", x}}, "2");
              }),
              HasSubstr("which has no output '2'; its outputs: 0, 1"));
}

TEST_F(TorchScriptSignatureTest, InputsThatDoNotBindAreNamed) {
  auto two = load("two_inputs");
  EXPECT_THAT(
      message_of<InvalidArgument>([&] {
        call_forward(*two, NamedTensors{{"tokens", tokens()}});
      }),
      HasSubstr("forward(tokens: Tensor, mask: Tensor) -> Tensor: argument 'mask: Tensor' gets "
                "no value and has no default; the inputs are named tokens; name an input "
                "'mask'"));
  EXPECT_THAT(message_of<InvalidArgument>([&] {
                call_forward(*two, std::vector<at::Tensor>{tokens(), mask(), mask()});
              }),
              HasSubstr("3 tensors given for 2 arguments"));
  auto needs_int = load("needs_int");
  EXPECT_THAT(message_of<InvalidArgument>([&] {
                call_forward(*needs_int, NamedTensors{{"x", mask()}, {"k", mask()}});
              }),
              HasSubstr("argument 'k: int' gets no value and has no default; the inputs are "
                        "named k, x; the library passes tensors only: give it a default in "
                        "Python"));
  auto dict = load("dict_input");
  EXPECT_THAT(
      message_of<InvalidArgument>([&] { call_forward(*dict, std::vector<at::Tensor>{mask()}); }),
      HasSubstr("argument 1 'batch: Dict[str, Tensor]' cannot take a tensor by position; pass "
                "the inputs by name"));
  auto list = load("returns_list");
  EXPECT_THAT(message_of<InvalidArgument>(
                  [&] { output_tensors(call_forward(*list, std::vector<at::Tensor>{mask()})); }),
              HasSubstr("a forward's result is a list of 1 (Tensor); return a tensor, a tuple "
                        "of tensors or a Dict[str, Tensor]"));
}

TEST_F(TorchScriptSignatureTest, TheStartUpCheckSaysWhatItCalledAndWhatCameBack) {
  auto two = load("two_inputs");
  const ForwardReport report =
      check_forward(*two, NamedTensors{{"tokens", tokens()}, {"mask", mask()}});
  EXPECT_THAT(report.description,
              HasSubstr("two_inputs.pt': forward(tokens: Tensor, mask: Tensor) -> Tensor called "
                        "with mask = a tensor of shape [2, 3] and dtype Float, tokens = a tensor "
                        "of shape [2, 3] and dtype Long; it returned a tensor of shape [2, 3] "
                        "and dtype Float"));
  EXPECT_EQ(report.outputs.size(), 1u);
  EXPECT_TRUE(report.outputs.count("output"));

  auto dict = load("dict_input");
  const ForwardReport dict_report =
      check_forward(*dict, NamedTensors{{"a", torch::ones({2})}, {"b", torch::ones({1})}});
  EXPECT_THAT(dict_report.description,
              HasSubstr("it returned a dict of 3 (logits = a tensor of shape [2] and dtype "
                        "Float, total = a tensor of shape [1] and dtype Float, count = a tensor "
                        "of shape [] and dtype Long)"));

  // A forward that raises: the call and the scripted exception; the mode is put back and the
  // batch-norm statistics did not move.
  auto raises = load("raises");
  raises->train();
  const std::string message = message_of<InvalidArgument>(
      [&] { check_forward(*raises, std::vector<at::Tensor>{torch::ones({3})}); });
  EXPECT_THAT(message, HasSubstr("called with a tensor of shape [3] and dtype Float raised: "));
  EXPECT_THAT(message, HasSubstr("x must be 2-D, one row per example"));
  EXPECT_TRUE(raises->is_training());
  check_forward(*raises, std::vector<at::Tensor>{torch::randn({4, 3})});
  EXPECT_TRUE(raises->is_training());
  EXPECT_EQ(raises->named_buffers()["bn.num_batches_tracked"].item<int64_t>(), 0);

  auto list = load("returns_list");
  EXPECT_THAT(
      message_of<InvalidArgument>([&] { check_forward(*list, std::vector<at::Tensor>{mask()}); }),
      HasSubstr("it returned a list of 1 (Tensor): a forward's result is"));
  EXPECT_THAT(message_of<InvalidArgument>([&] {
                check_forward(*two, NamedTensors{{"tokens", tokens()}});
              }),
              HasSubstr("called with tokens = a tensor of shape [2, 3] and dtype Long: the "
                        "inputs do not fit: "));
}

// Two replicas train a two-input module as one device does (the inputs split by rows).
TEST_F(TorchScriptSignatureTest, TwoReplicasTrainANamedInputModuleAsOneDevice) {
  auto train = [&](const Strategy& strategy) {
    auto model = strategy.mirror(load("two_inputs"));
    auto optimizer =
        strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.01));
    const int replicas = strategy.num_replicas_in_sync();
    for (int step = 0; step < 5; ++step) {
      std::vector<at::Tensor> token_shares, mask_shares;
      for (int r = 0; r < replicas; ++r) {
        token_shares.push_back(tokens().chunk(replicas)[r] + step);
        mask_shares.push_back(mask().chunk(replicas)[r]);
      }
      strategy.run(
          [&](const at::Tensor& t, const at::Tensor& m) {
            const at::Tensor y = forward_tensor(*model, NamedTensors{{"tokens", t}, {"mask", m}});
            ((y - 1).square().sum() / 6.0).backward();
            optimizer->apply_gradients();
          },
          PerReplica<at::Tensor>(token_shares, 2), PerReplica<at::Tensor>(mask_shares, 2));
    }
    return model.primary()->named_parameters()["w"].item<double>();
  };
  const double one = train(OneDeviceStrategy());
  MirroredOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  const double two = train(MirroredStrategy(options));
  EXPECT_NE(one, 3.0);
  EXPECT_NEAR(two, one, 1e-6 * std::abs(one));
}

}  // namespace
}  // namespace dist::models
