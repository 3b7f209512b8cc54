#include "tools/train_runs.h"

#include <algorithm>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>

#include <ATen/Parallel.h>

#include "dist_train_run.h"
#include "equivalence_data.h"
#include "tools/weight_files.h"
#include "train_options.h"

namespace dist::testing {

std::vector<std::string> job_args(const std::string& strategy, const std::string& weights,
                                  int max_steps) {
  return {"--strategy",
          strategy,
          "--optimizer",
          "sgd",
          "--train-examples",
          "1280",
          "--global-batch",
          "64",
          "--epochs",
          "100",
          "--max-steps",
          std::to_string(max_steps),
          "--seed",
          "5",
          "--no-progress",
          "--collective-timeout",
          "60",
          "--test-examples",
          "1000",
          "--save-weights",
          weights};
}

std::vector<std::string> with_flag(std::vector<std::string> args, const std::string& flag,
                                   const std::string& value) {
  const auto it = std::find(args.begin(), args.end(), flag);
  if (it != args.end() && it + 1 != args.end()) {
    *(it + 1) = value;
  } else {
    args.push_back(flag);
    args.push_back(value);
  }
  return args;
}

nlohmann::json last_json(const std::string& output, const std::string& prefix) {
  std::istringstream lines(output);
  std::string line, last;
  while (std::getline(lines, line))
    if (line.rfind(prefix + "{", 0) == 0) last = line.substr(prefix.size());
  return last.empty() ? nlohmann::json() : nlohmann::json::parse(last);
}

std::string reference_weights(std::vector<std::string> args) {
  using namespace std::chrono_literals;
  static std::mutex one_at_a_time;
  static TempDir kept;
  static std::map<std::vector<std::string>, std::string> trained;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  EXPECT_GE(args.size(), 2u);
  EXPECT_EQ(args.at(args.size() - 2), "--save-weights");
  args.back().clear();  // the key: the flags without the path
  const auto found = trained.find(args);
  if (found != trained.end()) return found->second;
  const std::string weights =
      kept.file("reference-" + std::to_string(trained.size()) + ".safetensors");
  std::vector<std::string> run = args;
  run.back() = weights;
  WorkerProcesses process;
  process.start(DIST_TRAIN_BINARY, run, {});
  const auto result = process.wait_all(240s).at(0);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  if (result.exit_code != 0) return weights;  // not kept: the next case tries again
  return trained.emplace(args, weights).first->second;
}

std::string one_device_weights(int max_steps) {
  return reference_weights(job_args("one_device", "", max_steps));
}

void expect_workers_reached(const ProcessResult& result, const std::string& source, int workers,
                            int devices, const std::string& weights, const std::string& expected,
                            double tolerance) {
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::string cluster = "Cluster: " + std::to_string(workers) + " workers from " + source;
  EXPECT_NE(result.output.find(cluster), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("Number of devices: " + std::to_string(devices)), std::string::npos)
      << result.output;
  const double diff = max_relative_difference(weights_in(weights), weights_in(expected));
  std::printf("%s, %d workers, %d devices: max relative difference %.3g\n", source.c_str(), workers,
              devices, diff);
  EXPECT_LT(diff, tolerance);
}

std::vector<std::string> small_multi_worker_job(int workers, std::vector<std::string> more) {
  std::vector<std::string> args{"--workers",
                                std::to_string(workers),
                                "--",
                                DIST_TRAIN_BINARY,
                                "--strategy",
                                "multi_worker",
                                "--collective-timeout",
                                "60",
                                "--train-examples",
                                "640",
                                "--global-batch",
                                "64",
                                "--seed",
                                "5",
                                "--no-progress"};
  if (std::find(more.begin(), more.end(), "--test-examples") == more.end())
    args.insert(args.end(), {"--test-examples", "1000"});
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

ProcessResult launch_job(const std::vector<std::string>& args) {
  WorkerProcesses launcher;
  launcher.start(DIST_LAUNCH_BINARY, args, {});
  return launcher.wait_all(std::chrono::seconds(300)).at(0);
}

ProcessResult run_dist_train_alone(const std::vector<std::string>& args) {
  WorkerProcesses process;
  process.start(DIST_TRAIN_BINARY, args, {});
  return process.wait_all(std::chrono::seconds(60)).at(0);
}

namespace {

// Thrown by dist_train_checks' hook before the first step. Not a std::exception, so that
// run_dist_train's mapping of errors to exit codes lets it through.
struct ChecksPassed {};

}  // namespace

ProcessResult dist_train_checks(const std::vector<std::string>& args) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> words{"dist-train"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  // The strategies set LibTorch's thread count for the whole process, as dist-train's own: this
  // process gets its own back.
  const int threads = at::get_num_threads();
  std::ostringstream out, err;
  ProcessResult result;
  tools::CommandLine line =
      tools::parse_command_line(static_cast<int>(words.size()), argv.data(), out, err);
  if (line.exit_code) {
    result.exit_code = *line.exit_code;
  } else {
    line.options.before_first_step = [] { throw ChecksPassed{}; };
    try {
      result.exit_code = tools::run_dist_train(line.options, out, err);
    } catch (const ChecksPassed&) {
      result.exit_code = kChecksPassed;
      err << "(dist_train_checks: every check passed; dist-train would have started training)\n";
    }
  }
  at::set_num_threads(threads);
  result.output = out.str() + err.str();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::vector<ProcessResult> processes_and_checks(const std::vector<std::vector<std::string>>& jobs,
                                                const std::vector<bool>& as_process) {
  EXPECT_EQ(jobs.size(), as_process.size());
  WorkerProcesses processes;
  for (size_t i = 0; i < jobs.size(); ++i)
    if (as_process.at(i)) processes.start(DIST_TRAIN_BINARY, jobs[i], {});
  std::vector<ProcessResult> results(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i)
    if (!as_process[i]) results[i] = dist_train_checks(jobs[i]);
  const std::vector<ProcessResult> ended = processes.wait_all(std::chrono::seconds(120));
  for (size_t i = 0, next = 0; i < jobs.size(); ++i)
    if (as_process[i]) results[i] = ended.at(next++);
  return results;
}

int64_t bytes_sent_per_step(const ProcessResult& result) {
  std::smatch match;
  static const std::regex line(R"(\[worker:0\] Bytes sent per step per worker: (\d+) )");
  EXPECT_TRUE(std::regex_search(result.output, match, line)) << result.output;
  return match.empty() ? -1 : std::stoll(match[1]);
}

}  // namespace dist::testing
