// The names in a checkpoint's own file (the layout is described once, in
// dist/train/checkpoint.h), and the reading of its object table: what the writer
// (checkpoint_writing.cc), the reader (checkpoint_reading.cc) and the object graph
// (checkpoint.cc) must agree on. Private to src/train.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <ATen/core/Tensor.h>

namespace dist::detail {

inline constexpr char kCheckpointFormat[] = "dist.checkpoint/1";  // metadata "format"
inline constexpr char kRandomStateTensor[] = "rng/cpu";           // the CPU generator's state
inline constexpr char kRandomStateOwner[] = "rng";                // a name no object may take
inline constexpr char kStateValuePrefix[] = "value/";             // TrainingState::values
inline constexpr char kObjectPrefix[] = "object/";                // the object table
// Files written before named objects: one model and one optimizer, under these names (and
// still written so for Checkpoint(model, optimizer), which earlier versions read).
inline constexpr char kLegacyModel[] = "model";
inline constexpr char kLegacyOptimizer[] = "optimizer";
inline constexpr char kLegacyLearningRate[] = "optimizer.lr/";

// The kinds of object, as "object/<name>" holds them.
inline constexpr char kModelKind[] = "model";
inline constexpr char kOptimizerKind[] = "optimizer";
inline constexpr char kTensorKind[] = "tensor";
inline constexpr char kHookKind[] = "communication_hook";

// DataError "checkpoint '<path>': <message>": what every reading failure throws.
[[noreturn]] void fail_reading(const std::string& path, const std::string& message);

// The integer metadata entry `key`; fail_reading if it is missing or not an integer.
int64_t parse_metadata_int(const std::string& path,
                           const std::map<std::string, std::string>& metadata,
                           const std::string& key);

// The object a tensor of the file belongs to: its name's first path component.
std::string tensor_owner(const std::string& tensor);

bool starts_with(const std::string& text, const std::string& prefix);

// An object as the file describes it.
struct FileObject {
  std::string kind;
  std::string optimizer_class;  // an optimizer's
  std::string model;            // the model an optimizer's slots are named by
  std::string learning_rate;    // the metadata prefix of an optimizer's learning rates
  std::string hook;             // a communication hook's name
  int64_t workers = 0;          // how many workers' hook states
};

// The objects of a file: from its "object/" entries, or those of a file written before named
// objects ("model" if it holds model tensors, "optimizer" if it holds optimizer state).
std::map<std::string, FileObject> objects_in_file(const std::string& path,
                                                  const std::map<std::string, std::string>& meta,
                                                  const std::map<std::string, at::Tensor>& tensors);

}  // namespace dist::detail
