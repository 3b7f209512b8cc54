// Every path dist-train writes goes through one check before anything trains (tools/
// job_outputs.h): each output flag against each kind of target a probe pointed it at (a device
// node, a FIFO, a symbolic link to a device, a read-only file, one of the job's own inputs, the
// path of another output). Every case ends in exit 2 naming the flag, before the first step, with
// the target exactly as it was. Device nodes and FIFOs are made inside the test's own temporary
// folder, never pointed at /dev. One case of each kind of target runs as a dist-train process
// (main exits 2 with the message); the others run dist-train's checks in this process
// (testing::dist_train_checks), with the same assertions.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "test_util.h"
#include "tools/train_runs.h"

namespace dist {
namespace {

namespace fs = std::filesystem;

// How a target looked: its kind, its inode and, for a regular file, its bytes.
struct Look {
  mode_t kind = 0;
  ino_t inode = 0;
  std::string bytes;
  bool operator==(const Look& o) const {
    return kind == o.kind && inode == o.inode && bytes == o.bytes;
  }
};

Look look_at(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {};
  Look look{st.st_mode & S_IFMT, st.st_ino, ""};
  if (S_ISREG(st.st_mode)) look.bytes = testing::read_file(path);
  return look;
}

// A target for one flag: the path given to the flag, and the path the job would write (the same
// for a file flag; the file dist-train writes inside a directory flag's directory).
struct Flag {
  std::string name;
  bool directory;
  std::string file_inside;  // for a directory flag
};

class OutputTargets {
 public:
  // The places every case of `flag` uses, under the case's own folder `dir`.
  OutputTargets(const testing::TempDir& dir, const Flag& flag, const std::string& kind)
      : root_(dir.file(flag.name.substr(2) + "-" + kind)), flag_(flag) {
    fs::create_directories(root_);
    model_ = root_ + "/model.pt";
    testing::write_file(model_, "not loaded: every case is refused before the model file is");
  }
  // The value to give the flag, and the path its writing would replace.
  std::string value() const { return flag_.directory ? root_ + "/out" : root_ + "/out.bin"; }
  std::string target() const {
    return flag_.directory ? value() + "/" + flag_.file_inside : value();
  }
  const std::string& model() const { return model_; }
  const std::string& root() const { return root_; }
  void prepare_parent() const {
    if (flag_.directory) fs::create_directories(value());
  }

 private:
  std::string root_;
  Flag flag_;
  std::string model_;
};

const std::vector<Flag> kFlags = {{"--save-weights", false, ""},
                                  {"--save-torchscript", false, ""},
                                  {"--timeline", false, ""},
                                  {"--log-dir", true, "metrics.jsonl"},
                                  {"--checkpoint-dir", true, "checkpoint"}};

// Whether this process may make device nodes; where mknod is not permitted, the device cases
// use FIFOs instead.
bool can_make_devices(const testing::TempDir& dir) {
  const std::string probe = dir.file("probe-device");
  const bool made = ::mknod(probe.c_str(), S_IFCHR | 0600, ::makedev(1, 3)) == 0;
  if (!made)
    std::cout << "[   NOTE   ] mknod not permitted here (" << std::strerror(errno)
              << "): the device cases use FIFOs instead\n";
  fs::remove(probe);
  return made;
}

// Makes a device node (as /dev/null: 1,3) inside the test's folder, or a FIFO where mknod is
// not permitted.
void make_device(const std::string& path, bool devices) {
  if (devices)
    ASSERT_EQ(::mknod(path.c_str(), S_IFCHR | 0600, ::makedev(1, 3)), 0) << std::strerror(errno);
  else
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
}

// Puts at t's target what `kind` names, adding to `args` what that needs.
void place_target(const std::string& kind, const Flag& flag, const OutputTargets& t, bool devices,
                  std::vector<std::string>& args) {
  if (kind == "device") {
    make_device(t.target(), devices);
  } else if (kind == "fifo") {
    ASSERT_EQ(::mkfifo(t.target().c_str(), 0600), 0) << std::strerror(errno);
  } else if (kind == "link-to-device") {
    make_device(t.root() + "/device", devices);
    fs::create_symlink(t.root() + "/device", t.target());
  } else if (kind == "read-only") {
    testing::write_file(t.target(), "kept");
    fs::permissions(t.target(), fs::perms::owner_read | fs::perms::group_read);
  } else if (kind == "input") {
    // The model file itself, or, inside a directory, a hard link to it (same inode).
    if (flag.directory)
      fs::create_hard_link(t.model(), t.target());
    else
      args.back() = t.value();  // --model-file is the output's own path
    if (!flag.directory) testing::write_file(t.value(), "the only copy of the model");
  } else {  // second-output: another output flag on the same file
    testing::write_file(t.target(), "an earlier result");
    const std::string other = flag.name == "--save-weights" ? "--timeline" : "--save-weights";
    args.insert(args.end(), {other, t.target()});
  }
}

TEST(DistTrainOutputsTest, EveryOutputFlagRefusesEveryTargetItMustNotReplaceBeforeTraining) {
  testing::TempDir dir;
  const bool devices = can_make_devices(dir);
  struct Kind {
    std::string name;
    std::string expected;  // words of the refusal
  };
  const std::vector<Kind> kinds = {
      {"device", devices ? "is not a regular file but a character device" : "is not a regular"},
      {"fifo", "is not a regular file but a FIFO"},
      {"link-to-device", "is a symbolic link to"},
      {"read-only", "a read-only file"},
      {"input", "an input of this job"},
      {"second-output", "is also where"}};
  int cases = 0, processes = 0;
  for (size_t f = 0; f < kFlags.size(); ++f) {
    const Flag& flag = kFlags[f];
    for (size_t k = 0; k < kinds.size(); ++k) {
      const Kind& kind = kinds[k];
      // Each kind once as a process, the flags taking turns (every flag at least once).
      const bool as_process = f == k % kFlags.size();
      SCOPED_TRACE(flag.name + " onto " + kind.name + (as_process ? " (process)" : ""));
      const OutputTargets t(dir, flag, kind.name);
      t.prepare_parent();
      std::vector<std::string> args{"--strategy",       "default", "--max-steps",    "1",
                                    "--train-examples", "64",      "--global-batch", "32",
                                    flag.name,          t.value()};
      // --save-torchscript needs a --model-file; the input case names it for every flag.
      if (flag.name == "--save-torchscript" || kind.name == "input")
        args.insert(args.end(), {"--model-file", t.model()});
      std::string watched = t.target();
      ASSERT_NO_FATAL_FAILURE(place_target(kind.name, flag, t, devices, args));
      const Look before = look_at(watched);
      const Look device_before = look_at(t.root() + "/device");
      const auto r =
          as_process ? testing::run_dist_train_alone(args) : testing::dist_train_checks(args);
      processes += as_process;
      EXPECT_EQ(r.exit_code, 2) << r.output;
      EXPECT_TRUE(testing::contains(r.output, flag.name)) << r.output;
      EXPECT_TRUE(testing::contains(r.output, kind.expected)) << r.output;
      EXPECT_FALSE(testing::contains(r.output, "Epoch 1/")) << r.output;
      EXPECT_TRUE(look_at(watched) == before) << watched << " was changed";
      if (kind.name == "link-to-device") {  // the link (watched) and what it points at
        EXPECT_TRUE(fs::is_symlink(t.target()));
        EXPECT_TRUE(look_at(t.root() + "/device") == device_before);
      }
      ++cases;
    }
  }
  EXPECT_EQ(cases, 30);
  EXPECT_EQ(processes, 6);
}

// A symbolic link to a regular file is written through: the file it points at gets the weights,
// the link stays a link (a rename onto the link would have replaced it).
TEST(DistTrainOutputsTest, AnOutputThroughASymbolicLinkReplacesTheFileAndKeepsTheLink) {
  testing::TempDir dir;
  fs::create_directories(dir.file("real"));
  testing::write_file(dir.file("real/weights.safetensors"), "old");
  fs::create_symlink(dir.file("real/weights.safetensors"), dir.file("link.safetensors"));
  const auto r = testing::run_dist_train_alone(
      {"--strategy", "default", "--max-steps", "1", "--train-examples", "64", "--test-examples",
       "64", "--global-batch", "32", "--save-weights", dir.file("link.safetensors")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_symlink(dir.file("link.safetensors")));
  EXPECT_GT(fs::file_size(dir.file("real/weights.safetensors")), 1000u);
}

}  // namespace
}  // namespace dist
