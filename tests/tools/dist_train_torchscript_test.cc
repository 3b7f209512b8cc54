// dist-train --model-file as a user meets it: TorchScript classifiers from Python (written at
// build time into DIST_TORCHSCRIPT_TEST_DIR by examples/python/make_torchscript_models.py)
// trained under every strategy to one device's weights, the trained module read back by
// Python's torch.jit.load (DIST_TORCH_PYTHON, Debian's python3-torch), and every bad model file
// refused with exit 2 before anything is written. Real processes, bounded in time.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dist/data/mnist.h"
#include "dist/models/torchscript_model.h"
#include "dist/train/safetensors.h"
#include "equivalence_data.h"
#include "models/zip_files.h"
#include "multi_worker/process_group.h"
#include "test_util.h"
#include "tools/train_runs.h"
#include "tools/weight_files.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::ProcessResult;
using testing::TempDir;

std::string model_file(const std::string& name) {
  return std::string(DIST_TORCHSCRIPT_TEST_DIR) + "/" + name;
}

// 20 SGD steps (lr 0.2) of global batch 64 on 1280 examples from `model`, saving the weights
// to `weights`: the same for every strategy (flags for dist-train after its binary).
std::vector<std::string> script_job(const std::string& strategy, const std::string& model,
                                    const std::string& weights) {
  auto args = testing::job_args(strategy, weights);
  args.insert(args.end(), {"--model-file", model_file(model + ".pt"), "--lr", "0.2"});
  return args;
}

// dist-launch's arguments for `workers` workers of `replicas` replicas each running script_job.
std::vector<std::string> launched(int workers, int replicas, std::vector<std::string> job) {
  std::vector<std::string> args{
      "--workers", std::to_string(workers), "--replicas-per-worker", std::to_string(replicas),
      "--",        DIST_TRAIN_BINARY};
  args.insert(args.end(), job.begin(), job.end());
  return args;
}

// Starts every dist-train run of `jobs` at once and waits for them all.
std::vector<ProcessResult> run_together(const std::vector<std::vector<std::string>>& jobs) {
  testing::WorkerProcesses processes;
  for (const auto& job : jobs) processes.start(DIST_TRAIN_BINARY, job, {});
  return processes.wait_all(120s);
}

double difference(const std::string& a, const std::string& b, const std::string& what) {
  const double d = testing::max_relative_difference(testing::weights_in(a), testing::weights_in(b));
  std::printf("%s: max relative difference to one device %.3g\n", what.c_str(), d);
  return d;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class DistTrainTorchScriptTest : public ::testing::TestWithParam<std::string> {};

// Mirrored x2 and x3, CentralStorage x2 and fit (Mirrored x2) in one process each, started
// together; then MultiWorker 2x1 and 2x2, each sharding level (2 workers) and a parameter
// server job with one worker, through dist-launch. Every run ends within 1e-5 of one device.
TEST_P(DistTrainTorchScriptTest, EveryStrategyEndsAtTheWeightsOfOneDevice) {
  TempDir dir;
  const std::string model = GetParam();
  auto in_process = [&](const std::string& name, const std::string& strategy,
                        std::vector<std::string> more) {
    auto args = script_job(strategy, model, dir.file(name));
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const std::vector<std::vector<std::string>> jobs{
      in_process("one", "one_device", {}), in_process("mirrored2", "mirrored", {"--replicas", "2"}),
      in_process("mirrored3", "mirrored", {"--replicas", "3"}),
      in_process("central2", "central_storage", {"--replicas", "2"}),
      in_process("fit_mirrored2", "mirrored", {"--replicas", "2", "--loop", "fit"})};
  const auto results = run_together(jobs);
  for (const auto& result : results) ASSERT_EQ(result.exit_code, 0) << result.output;
  // The weights by the module's own (Python's) names, in state_dict's order, in both loops.
  const auto names = lines_of(model_file(model + ".parameters.txt"));
  for (const std::string name : {"one", "fit_mirrored2"}) {
    std::vector<std::string> keys;
    for (const auto& [key, value] : load_safetensors(dir.file(name)).tensors) keys.push_back(key);
    EXPECT_EQ(keys, names) << name;
  }
  for (const std::string name : {"mirrored2", "mirrored3", "central2", "fit_mirrored2"})
    EXPECT_LT(difference(dir.file(name), dir.file("one"), model + " " + name), 1e-5);

  struct Launch {
    std::string name;
    int workers, replicas;
    std::string sharding;
  };
  for (const Launch& l :
       {Launch{"workers2x1", 2, 1, "none"}, Launch{"workers2x2", 2, 2, "none"},
        Launch{"optimizer", 2, 1, "optimizer"}, Launch{"gradients", 2, 1, "gradients"},
        Launch{"parameters", 2, 1, "parameters"}}) {
    auto job = script_job("multi_worker", model, dir.file(l.name));
    job.insert(job.end(), {"--sharding", l.sharding});
    const auto result = testing::launch_job(launched(l.workers, l.replicas, job));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_LT(difference(dir.file(l.name), dir.file("one"), model + " " + l.name), 1e-5);
    if (l.sharding == "parameters") {
      EXPECT_TRUE(testing::contains(result.output, "gathers the scripted module whole"))
          << result.output;
    }
  }
  std::vector<std::string> ps{"--workers", "1", "--ps", "1", "--", DIST_TRAIN_BINARY};
  const auto ps_job = script_job("parameter_server", model, dir.file("ps"));
  ps.insert(ps.end(), ps_job.begin(), ps_job.end());
  const auto result = testing::launch_job(ps);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_LT(difference(dir.file("ps"), dir.file("one"), model + " parameter_server"), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Models, DistTrainTorchScriptTest,
                         ::testing::Values("cnn_scripted", "cnn_traced"));

// Mixed precision and gradient compression act on a scripted module as on a built-in model: each
// run trains (its weights leave the initial ones), ends near one device's float32 weights, and
// not on them (bfloat16 took part: its rounding shows). Mirrored x2, custom loop; fit, bf16.
TEST(DistTrainTorchScriptOptionsTest, MixedPrecisionAndCompressionTrainTheModule) {
  TempDir dir;
  auto run = [&](const std::string& name, std::vector<std::string> more) {
    auto args =
        script_job(name == "one" ? "one_device" : "mirrored", "cnn_scripted", dir.file(name));
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const std::vector<std::string> names{"one", "bf16", "fit_bf16", "compressed", "powersgd"};
  const auto results = run_together(
      {run("one", {}), run("bf16", {"--replicas", "2", "--mixed-precision", "bf16"}),
       run("fit_bf16", {"--replicas", "2", "--mixed-precision", "bf16", "--loop", "fit"}),
       run("compressed",
           {"--replicas", "2", "--gradient-compression", "bf16", "--compress-packs-from", "0"}),
       run("powersgd", {"--replicas", "2", "--gradient-compression", "powersgd:2:5",
                        "--compress-packs-from", "0"})});
  for (const auto& result : results) ASSERT_EQ(result.exit_code, 0) << result.output;
  std::vector<at::Tensor> initial =
      models::load_torchscript(model_file("cnn_scripted.pt"))->parameters();
  const auto one = testing::weights_in(dir.file("one"));
  EXPECT_GT(testing::max_relative_difference(one, initial), 1e-2) << "nothing trained";
  for (size_t i = 1; i < names.size(); ++i) {
    const double d = difference(dir.file(names[i]), dir.file("one"), "cnn_scripted " + names[i]);
    EXPECT_GT(d, 0.0) << names[i] << ": no rounding of bfloat16 or compression shows";
    EXPECT_LT(d, 0.1) << names[i];
  }
}

// The project's checkpoints hold a scripted module as they hold a built-in model: a run stopped
// at step 6 (between periodic saves) and resumed to step 14 ends with the weights, and writes
// the module, of an uninterrupted run, bit for bit (Mirrored x2, custom loop).
TEST(DistTrainTorchScriptResumeTest, AResumedRunEndsWithTheSameWeightsBitForBit) {
  TempDir dir;
  auto job = [&](const std::string& name, int steps, bool checkpoints) {
    auto args = script_job("mirrored", "cnn_scripted", dir.file(name + ".safetensors"));
    args = testing::with_flag(args, "--max-steps", std::to_string(steps));
    args.insert(args.end(), {"--replicas", "2", "--save-torchscript", dir.file(name + ".pt")});
    if (checkpoints)
      args.insert(args.end(), {"--checkpoint-dir", dir.file("ckpt"), "--checkpoint-every", "4"});
    return args;
  };
  const auto runs = run_together({job("whole", 14, false), job("first", 6, true)});
  for (const auto& run : runs) ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto resumed = run_together({job("resumed", 14, true)}).at(0);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(testing::contains(resumed.output, "at step 6")) << resumed.output;
  testing::expect_same_weights(dir.file("whole.safetensors"), dir.file("resumed.safetensors"));
  auto whole = models::load_torchscript(dir.file("whole.pt"));
  auto again = models::load_torchscript(dir.file("resumed.pt"));
  auto expected = whole->named_parameters();
  for (const auto& item : again->named_parameters())
    EXPECT_TRUE(torch::equal(item.value(), expected[item.key()])) << item.key();
}

// The first `n` Fashion-MNIST test images and labels, scaled as dist-train scales them.
std::pair<at::Tensor, at::Tensor> test_images(int64_t n) {
  auto batches = data::fashion_mnist_bytes("/usr/share/datasets/fashion-mnist", data::Split::kTest)
                     .take(n)
                     .batch(n)
                     .map(data::scale_images_of);
  auto first = batches.iterator().next();
  EXPECT_TRUE(first.has_value());
  return {(*first)[0].contiguous(), (*first)[1].to(torch::kLong).contiguous()};
}

void write_tensor_bytes(const std::string& path, const at::Tensor& t) {
  testing::write_file(path, std::string(static_cast<const char*>(t.data_ptr()), t.nbytes()));
}

// The module written by --save-torchscript (Mirrored x2), loaded by Python's torch.jit.load,
// gives our outputs on 1000 test images within 1e-6, and dist-train's test accuracy.
TEST(DistTrainTorchScriptReadBackTest, PythonRunsTheWrittenModuleAsWeDo) {
  TempDir dir;
  auto args = script_job("mirrored", "cnn_scripted", dir.file("w.safetensors"));
  // 40 steps at lr 0.5: about 0.55 test accuracy, far from chance (0.1, where every image may
  // get one class and any two models agree).
  args = testing::with_flag(testing::with_flag(args, "--lr", "0.5"), "--max-steps", "40");
  args.insert(args.end(), {"--replicas", "2", "--save-torchscript", dir.file("trained.pt")});
  const auto result = testing::run_dist_train_alone(args);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const double reported = testing::last_json(result.output).at("test_accuracy").get<double>();

  auto [images, labels] = test_images(1000);
  auto model = models::load_torchscript(dir.file("trained.pt"));
  model->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor ours = model->forward(images).contiguous();
  write_tensor_bytes(dir.file("images.f32"), images);
  write_tensor_bytes(dir.file("labels.i64"), labels);
  testing::WorkerProcesses python;
  python.start(DIST_TORCH_PYTHON,
               {DIST_TORCHSCRIPT_EVALUATOR, dir.file("trained.pt"), dir.file("images.f32"),
                "--labels", dir.file("labels.i64"), "--outputs", dir.file("outputs.f32")},
               {});
  const auto run = python.wait_all(60s).at(0);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto answer = testing::last_json(run.output);
  ASSERT_FALSE(answer.is_null()) << run.output;
  const std::string bytes = testing::read_file(dir.file("outputs.f32"));
  ASSERT_EQ(bytes.size(), ours.nbytes());
  at::Tensor theirs = torch::empty_like(ours);
  std::memcpy(theirs.data_ptr(), bytes.data(), bytes.size());
  const double diff = (theirs - ours).abs().max().item<double>();
  std::printf(
      "Python's outputs against ours: max difference %.3g; accuracy %.4f (dist-train "
      "reported %.4f)\n",
      diff, answer.at("accuracy").get<double>(), reported);
  EXPECT_LE(diff, 1e-6);
  EXPECT_EQ(answer.at("images"), 1000);
  // The same images right (dist-train's metric sums in float32).
  EXPECT_EQ(std::lround(answer.at("accuracy").get<double>() * 1000), std::lround(reported * 1000));
  EXPECT_GT(reported, 0.3);
}

// The bad model files made from good ones, in `dir`: a text file, one cut in half, one with a
// record shorter than its tensor, and a zip bomb.
void write_bad_model_files(const TempDir& dir) {
  testing::write_file(dir.file("notes.pt"), "a model, I promise\n");
  const std::string whole = testing::read_file(model_file("cnn_scripted.pt"));
  testing::write_file(dir.file("truncated.pt"), whole.substr(0, whole.size() / 2));
  // Issue 68, 1: dense1.weight's record rewritten 100 bytes long (LibTorch trained on the heap
  // past them); 11: data.pkl inflating to 80 MiB of zeros from 80 KB (over 64 MiB beyond the file).
  auto records = testing::read_zip(whole);
  auto cut = records;
  for (auto& record : cut)
    if (record.data.size() == 51200) record.data.resize(100);
  testing::write_file(dir.file("cut_record.pt"), testing::write_zip(cut));
  for (auto& record : records)
    if (record.name.find("data.pkl") != std::string::npos)
      record = testing::deflated_zeros(record.name, record.data, uint64_t{80} << 20);
  testing::write_file(dir.file("bomb.pt"), testing::write_zip(records));
}

// A bad file as --model-file, run with every output flag: exit 2, a message naming the flag and
// the file, and nothing written (no checkpoint directory, no weights, no module). One file of
// each stage of the checks (reading the file, the archive, the module, its forward) as a
// dist-train process; the others through dist-train's checks in this process.
TEST(DistTrainTorchScriptErrorsTest, EveryBadModelFileIsRefusedBeforeAnythingIsWritten) {
  TempDir dir;
  write_bad_model_files(dir);
  struct Bad {
    std::string path, says;
  };
  const std::vector<Bad> bad{
      {dir.file("notes.pt"), "is a text file"},
      {dir.file("truncated.pt"), "is truncated"},
      {dir.file("missing.pt"), "does not exist"},
      {model_file("state_dict.pt"), "a zip archive of torch.save()"},
      {model_file("damaged.pt"), "cannot be loaded"},
      {model_file("newer_version.pt"), "written by a newer PyTorch"},
      {model_file("newer_operator.pt"), "does not have"},
      {model_file("no_forward.pt"), "has no forward method"},
      {model_file("no_parameters.pt"), "has no parameters"},
      {model_file("frozen_weights.pt"), "no parameter that requires a gradient"},
      {model_file("forward_tuple.pt"), "it returned a tuple of 2"},
      {model_file("forward_list.pt"), "it returned a list of 1"},
      {model_file("forward_rank3.pt"), "rank 3 instead of 2"},
      {model_file("forward_one_row.pt"), "1 rows for 2 images"},
      {model_file("forward_long.pt"), "not class indices"},
      {model_file("forward_raises.pt"), "this model wants 3 channels"},
      {dir.file("cut_record.pt"),
       "holds 100 bytes, but the Float tensor [32, 400] stored there "
       "needs 51200"},
      {dir.file("bomb.pt"), "a zip bomb"},
      {model_file("int_parameter.pt"), "has the Long parameter 'steps'"}};
  std::vector<std::vector<std::string>> jobs;
  std::vector<bool> as_process;
  for (size_t i = 0; i < bad.size(); ++i) {
    // missing.pt, no_forward.pt, forward_raises.pt and the zip bomb as processes.
    as_process.push_back(i == 2 || i == 7 || i == 15 || i == 17);
    const std::string out = dir.file("out" + std::to_string(i));
    auto args = testing::job_args("one_device", out + "/w.safetensors");
    args.insert(args.end(),
                {"--model-file", bad[i].path, "--checkpoint-dir", out + "/ckpt",
                 "--save-torchscript", out + "/trained.pt", "--log-dir", out + "/logs"});
    jobs.push_back(args);
  }
  const auto results = testing::processes_and_checks(jobs, as_process);
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE(bad[i].path + (as_process[i] ? " (process)" : ""));
    EXPECT_EQ(results[i].exit_code, 2) << results[i].output;
    EXPECT_TRUE(testing::contains(results[i].output, "dist-train: --model-file: "))
        << results[i].output;
    EXPECT_TRUE(testing::contains(results[i].output, bad[i].path)) << results[i].output;
    EXPECT_TRUE(testing::contains(results[i].output, bad[i].says)) << results[i].output;
    EXPECT_FALSE(std::filesystem::exists(dir.file("out" + std::to_string(i))));
  }
}

// Issue 68, 9: a SIGTERM while dist-train checks the module's forward on the first batch (here a
// forward that runs for minutes) was ignored until the forward ended; it now ends the start-up
// within about a second, exit 4, nothing trained or written.
TEST(DistTrainTorchScriptSignalTest, SigtermDuringTheChecksForwardExitsFourAtOnce) {
  TempDir dir;
  auto args = script_job("mirrored", "slow_forward", dir.file("out/w.safetensors"));
  args.insert(args.end(), {"--replicas", "2", "--checkpoint-dir", dir.file("out/ckpt")});
  testing::WorkerProcesses process;
  process.start(DIST_TRAIN_BINARY, args, {});
  // Printed just before the data are read and the module loaded: its forward starts at once.
  ASSERT_TRUE(process.wait_for_output(0, "Global batch size", 60s));
  std::this_thread::sleep_for(1s);
  const auto signalled = std::chrono::steady_clock::now();
  process.kill(0, SIGTERM);
  const ProcessResult result = process.wait_all(120s).at(0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  std::printf("SIGTERM during the check's forward: exit %d after %.2f s\n", result.exit_code,
              seconds);
  EXPECT_EQ(result.exit_code, 4) << result.output;
  EXPECT_LT(seconds, 2.0) << result.output;
  EXPECT_TRUE(testing::contains(result.output,
                                "stopped by SIGTERM while checking the forward of "
                                "--model-file " +
                                    model_file("slow_forward.pt")))
      << result.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out")));
}

// What a scripted module cannot do, and flags that contradict --model-file, are refused by name
// before training (exit 2).
TEST(DistTrainTorchScriptErrorsTest, FlagsThatCannotApplyAreRefusedByName) {
  TempDir dir;
  const std::string cnn = model_file("cnn_scripted.pt");
  struct Refused {
    std::vector<std::string> flags;
    std::string says;
  };
  const std::vector<Refused> refused{
      {{"--model-file", cnn, "--model", "mlp"}, "--model mlp and --model-file"},
      {{"--model-file", cnn, "--sync-batch-norm"},
       "a scripted graph's batch norms cannot be swapped for synchronized ones"},
      {{"--save-torchscript", dir.file("t.pt")}, "give --model-file, or use --save-weights"},
      {{"--model-file", cnn, "--save-torchscript", cnn}, "is --model-file"}};
  std::vector<std::vector<std::string>> jobs;
  for (const auto& r : refused) {
    auto args = testing::job_args("mirrored", dir.file("w.safetensors"));
    args.insert(args.end(), r.flags.begin(), r.flags.end());
    jobs.push_back(args);
  }
  // The first (refused as the flags are parsed) and the last (by the output checks, as the job
  // starts) as processes.
  const auto results = testing::processes_and_checks(jobs, {true, false, false, true});
  for (size_t i = 0; i < refused.size(); ++i) {
    EXPECT_EQ(results[i].exit_code, 2) << results[i].output;
    EXPECT_TRUE(testing::contains(results[i].output, refused[i].says)) << results[i].output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("w.safetensors")));
}

}  // namespace
}  // namespace dist
