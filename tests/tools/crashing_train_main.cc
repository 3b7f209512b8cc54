// crashing_train (test only): dist-train's custom training job (tools/train_job.h) with an Env
// that kills the process with SIGKILL at one stage of a checkpoint save, as a power cut or
// kill -9 would. dist_train_checkpoint_test.cc resumes from what it leaves behind.
//
//   crashing_train --crash-at STAGE [dist-train flags]
//
// STAGE: after_data      the checkpoint's bytes are in its temporary file, not yet synced
//        before_rename   the temporary file is synced and closed, not yet renamed
//        before_pointer  the checkpoint is complete, the pointer file not yet replaced
// Of dist-train's flags it takes those the crash tests use (kFlags); others exit 2. Exits 5 if
// the job ends without reaching STAGE, as dist-train otherwise.
#include <signal.h>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <string>

#include "dist/core/env.h"
#include "dist/core/error.h"
#include "run_training.h"
#include "train_job.h"

namespace {

using dist::Env;
using dist::WritableFile;

bool name_starts_with(const std::string& path, const std::string& prefix) {
  const auto slash = path.rfind('/');
  return path.compare(slash == std::string::npos ? 0 : slash + 1, prefix.size(), prefix) == 0;
}

// "ckpt-<step>.safetensors" and its temporary "ckpt-<step>.safetensors.tmp.<pid>".
bool is_checkpoint_file(const std::string& path) { return name_starts_with(path, "ckpt-"); }
// The pointer file's temporary "checkpoint.tmp.<pid>".
bool is_pointer_temporary(const std::string& path) {
  return name_starts_with(path, "checkpoint.tmp.");
}

[[noreturn]] void crash() {
  ::raise(SIGKILL);
  std::abort();  // not reached
}

// Kills the process before syncing: the data is written, not yet durable.
class CrashOnSync : public WritableFile {
 public:
  explicit CrashOnSync(std::unique_ptr<WritableFile> file) : file_(std::move(file)) {}
  void append(const void* data, size_t size) override { file_->append(data, size); }
  void flush() override { file_->flush(); }
  void sync() override { crash(); }
  void close() override { file_->close(); }

 private:
  std::unique_ptr<WritableFile> file_;
};

class CrashingEnv : public dist::EnvWrapper {
 public:
  CrashingEnv(Env* target, std::string stage) : EnvWrapper(target), stage_(std::move(stage)) {}

  std::unique_ptr<WritableFile> new_writable_file(const std::string& path) override {
    if (stage_ == "before_pointer" && is_pointer_temporary(path)) crash();
    auto file = EnvWrapper::new_writable_file(path);
    if (stage_ == "after_data" && is_checkpoint_file(path))
      return std::make_unique<CrashOnSync>(std::move(file));
    return file;
  }
  void rename_file(const std::string& from, const std::string& to) override {
    if (stage_ == "before_rename" && is_checkpoint_file(to)) crash();
    EnvWrapper::rename_file(from, to);
  }

 private:
  std::string stage_;
};

int64_t to_int(const std::string& flag, const std::string& text) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
  }
  DIST_CHECK_ARG(used == text.size() && !text.empty(), flag, " needs an integer, got '", text, "'");
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  dist::tools::TrainOptions o;
  std::string stage;
  bool no_progress = false;
  using Set = std::function<void(const std::string& flag, const std::string& value)>;
  const std::map<std::string, Set> kFlags = {
      {"--crash-at", [&](auto&, auto& v) { stage = v; }},
      {"--strategy", [&](auto&, auto& v) { o.strategy = dist::tools::parse_strategy(v); }},
      {"--replicas", [&](auto& f, auto& v) { o.replicas = static_cast<int>(to_int(f, v)); }},
      {"--train-examples", [&](auto& f, auto& v) { o.train_examples = to_int(f, v); }},
      {"--global-batch", [&](auto& f, auto& v) { o.global_batch = to_int(f, v); }},
      {"--epochs", [&](auto& f, auto& v) { o.epochs = static_cast<int>(to_int(f, v)); }},
      {"--seed", [&](auto& f, auto& v) { o.seed = static_cast<uint64_t>(to_int(f, v)); }},
      {"--max-steps", [&](auto& f, auto& v) { o.max_steps = to_int(f, v); }},
      {"--checkpoint-dir", [&](auto&, auto& v) { o.checkpoint_dir = v; }},
      {"--checkpoint-every", [&](auto& f, auto& v) { o.checkpoint_every = to_int(f, v); }},
      {"--data-dir", [&](auto&, auto& v) { o.data_dir = v; }},
  };
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "--no-progress") {
        no_progress = true;
        continue;
      }
      auto it = kFlags.find(flag);
      DIST_CHECK_ARG(it != kFlags.end(), "unknown flag '", flag, "'");
      DIST_CHECK_ARG(i + 1 < argc, flag, " needs a value");
      it->second(flag, argv[++i]);
    }
    dist::tools::apply_launcher_environment(o);
    DIST_CHECK_ARG(stage == "after_data" || stage == "before_rename" || stage == "before_pointer",
                   "--crash-at must be after_data, before_rename or before_pointer, got '", stage,
                   "'");
  } catch (const dist::InvalidArgument& e) {
    std::cerr << "crashing_train: " << e.what() << std::endl;
    return 2;
  }
  o.progress = !no_progress;

  CrashingEnv env(Env::Default(), stage);
  o.env = &env;
  try {
    auto result = dist::tools::run_training(o, std::cout);
    std::cout << dist::tools::to_json_line(result) << std::endl;
    std::cerr << "crashing_train: the job ended without reaching stage " << stage << std::endl;
    return 5;
  } catch (const std::exception& e) {
    std::cerr << "crashing_train: " << e.what() << std::endl;
    return 1;
  }
}
