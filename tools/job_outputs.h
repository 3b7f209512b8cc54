// Every path a dist-train job writes, checked in one place before anything trains: the weights,
// the TorchScript module, the timeline, the log and checkpoint directories and the files
// dist-train keeps in them. A path is refused (InvalidArgument: exit 2, naming the flag) when
//   - it holds something a new file must not replace (dist/core/output_file.h: a device node,
//     a FIFO, a socket, a directory where a file goes, a symbolic link to one of them, a
//     read-only file), or a file where a directory goes;
//   - it is one of the job's inputs (the same file: --model-file, --resume-from, a data file),
//     or lies inside an image folder the job reads;
//   - two outputs would write the same file (--save-weights X --save-torchscript X, or a file
//     output that is an output directory, or one of the files dist-train writes in it).
// Nothing is created or written by the check: the directories are created later, on the chief,
// once the model file has proved loadable (train_job.cc).
#pragma once

#include <string>
#include <vector>

#include "train_options.h"

namespace dist::tools {

// One output of the job: the flag that names it, its path, whether it is a directory, and for a
// directory the files dist-train writes directly in it.
struct JobOutput {
  std::string flag;
  std::string path;
  bool directory = false;
  std::vector<std::string> files;
};

// The outputs the options name, on this task (--timeline's file carries the task's name in a
// cluster: timeline_file.h).
std::vector<JobOutput> job_outputs(const TrainOptions& options);

// Throws InvalidArgument naming the flag when an output would destroy something or be lost
// (above). Read-only: safe on every task of a cluster.
void check_job_outputs(const TrainOptions& options);

}  // namespace dist::tools
