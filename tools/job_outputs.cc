#include "job_outputs.h"

#include <sys/stat.h>

#include <filesystem>
#include <optional>
#include <utility>

#include "dist/core/error.h"
#include "dist/core/output_file.h"
#include "dist/data/files.h"
#include "timeline_file.h"

namespace dist::tools {
namespace {

namespace fs = std::filesystem;

// A path made absolute with its existing part resolved (symbolic links, "..", "."), so that two
// spellings of one place compare equal.
std::string place_of(const std::string& path) {
  std::error_code error;
  fs::path place = fs::weakly_canonical(fs::absolute(path, error), error);
  return error ? fs::absolute(path).lexically_normal().string() : place.string();
}

// The file's identity (device and inode), following links; none when it does not exist.
std::optional<std::pair<dev_t, ino_t>> identity_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return std::make_pair(st.st_dev, st.st_ino);
}

// What the job reads: files by identity, and the folders it reads whole (an image folder), by
// place. `flag` names where each came from.
struct JobInputs {
  std::vector<std::pair<std::string, std::string>> files;    // {flag, path}
  std::vector<std::pair<std::string, std::string>> folders;  // {flag, place}
};

// A data spec's files or folder ("tfrecord:GLOB", "images:DIR"); a spec that matches nothing is
// left to the data's own check, which names it better.
void add_data_spec(JobInputs& inputs, const std::string& flag, const std::string& spec) {
  if (spec.rfind("images:", 0) == 0) {
    inputs.folders.emplace_back(flag, place_of(spec.substr(7)));
  } else if (spec.rfind("tfrecord:", 0) == 0) {
    try {
      for (const std::string& file : data::match_files(spec.substr(9)))
        inputs.files.emplace_back(flag, file);
    } catch (const std::exception&) {
    }
  }
}

JobInputs job_inputs(const TrainOptions& options) {
  JobInputs inputs;
  if (!options.model_file.empty()) inputs.files.emplace_back("--model-file", options.model_file);
  if (!options.resume_from.empty()) inputs.files.emplace_back("--resume-from", options.resume_from);
  if (options.train_data.empty()) {
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(options.data_dir, error))
      inputs.files.emplace_back("--data-dir", entry.path().string());
  }
  add_data_spec(inputs, "--train-data", options.train_data);
  add_data_spec(inputs, "--test-data", options.test_data);
  return inputs;
}

bool inside(const std::string& place, const std::string& folder) {
  return place == folder || place.rfind(folder + "/", 0) == 0;
}

// `path` (an output of `flag`, a file) replaces nothing it must not.
void check_replaceable(const std::string& flag, const std::string& path) {
  const std::string why = why_not_an_output_file(path);
  DIST_CHECK_ARG(why.empty(), flag, " ", path, " ", why,
                 "; dist-train replaces only a regular file it may write, and checks before "
                 "training: choose another path");
}

void check_directory(const JobOutput& output) {
  std::error_code error;
  const auto status = fs::status(output.path, error);
  DIST_CHECK_ARG(!fs::exists(status) || fs::is_directory(status), output.flag, " ", output.path,
                 " exists and is not a directory; give a directory (it is created if missing)");
  for (const std::string& file : output.files)
    check_replaceable(output.flag, (fs::path(output.path) / file).string());
}

// `output` is none of the job's inputs, nor inside a folder the job reads.
void check_not_an_input(const JobOutput& output, const JobInputs& inputs) {
  std::vector<std::string> written{output.path};
  for (const std::string& file : output.files)
    written.push_back((fs::path(output.path) / file).string());
  for (const std::string& path : written) {
    const auto identity = identity_of(path);
    for (const auto& [flag, input] : inputs.files)
      DIST_CHECK_ARG(!identity || identity != identity_of(input), output.flag, " ", output.path,
                     path == output.path ? "" : " (its " + fs::path(path).filename().string() + ")",
                     " is ", flag, " ", input,
                     ", an input of this job: it would be replaced; write to another path");
    const std::string place = place_of(path);
    for (const auto& [flag, folder] : inputs.folders)
      DIST_CHECK_ARG(!inside(place, folder), output.flag, " ", output.path, " is inside ", flag,
                     "'s image folder ", folder,
                     ", an input of this job: write outside the folders it reads");
  }
}

// No two outputs write one file: file against file, and a file output against a directory
// output or a file dist-train writes in it.
void check_distinct(const std::vector<JobOutput>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].directory) continue;
    const std::string place = place_of(outputs[i].path);
    for (size_t j = 0; j < outputs.size(); ++j) {
      if (j == i) continue;
      const JobOutput& other = outputs[j];
      std::vector<std::string> taken{place_of(other.path)};
      for (const std::string& file : other.files)
        taken.push_back(place_of((fs::path(other.path) / file).string()));
      for (const std::string& other_place : taken)
        DIST_CHECK_ARG(place != other_place, outputs[i].flag, " ", outputs[i].path,
                       " is also where ", other.flag, " ", other.path,
                       other.directory ? " (a directory, or a file dist-train writes in it)" : "",
                       " is written: one would replace the other; give each output its own path");
    }
  }
}

}  // namespace

std::vector<JobOutput> job_outputs(const TrainOptions& options) {
  std::vector<JobOutput> outputs;
  if (!options.save_weights.empty())
    outputs.push_back({"--save-weights", options.save_weights, false, {}});
  if (!options.save_torchscript.empty())
    outputs.push_back({"--save-torchscript", options.save_torchscript, false, {}});
  if (!options.timeline.empty())
    outputs.push_back({"--timeline", timeline_options(options).path, false, {}});
  if (!options.log_dir.empty())
    outputs.push_back({"--log-dir", options.log_dir, true, {"metrics.jsonl", "metrics.csv"}});
  if (!options.checkpoint_dir.empty())
    outputs.push_back({"--checkpoint-dir", options.checkpoint_dir, true, {"checkpoint"}});
  return outputs;
}

void check_job_outputs(const TrainOptions& options) {
  const std::vector<JobOutput> outputs = job_outputs(options);
  if (outputs.empty()) return;
  const JobInputs inputs = job_inputs(options);
  for (const JobOutput& output : outputs) {
    if (output.directory)
      check_directory(output);
    else
      check_replaceable(output.flag, output.path);
    check_not_an_input(output, inputs);
  }
  check_distinct(outputs);
}

}  // namespace dist::tools
