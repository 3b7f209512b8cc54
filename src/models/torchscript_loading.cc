// Loading a TorchScript file with errors that say what the file is and what to do
// (dist/models/torchscript_model.h).
//
// torch::jit::load alone says "PytorchStreamReader failed reading zip archive: failed finding
// central directory" for a truncated file and for a safetensors file alike. So the file is
// looked at in three steps, each naming what it finds: its first bytes (a zip archive, or
// safetensors, an old torch.save pickle, text); the zip archive's directory and version record
// (PyTorchStreamReader: a truncated file has no central directory, a newer PyTorch's has a
// higher version, a torch.save() zip has no code/); then the TorchScript import itself (an
// operator this LibTorch lacks, damaged records).
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/jit/serialization/import.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <regex>
#include <string>
#include <unordered_map>

#include "core/atomic_file.h"
#include "dist/core/error.h"
#include "dist/core/output_file.h"
#include "dist/models/torchscript_model.h"
#include "models/torchscript_archive.h"
#include "models/torchscript_describe.h"

namespace dist::models {
namespace {

// PyTorch's zip reader over the library's file-system seam.
class EnvReadAdapter : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit EnvReadAdapter(std::unique_ptr<RandomAccessFile> file) : file_(std::move(file)) {}
  const RandomAccessFile& file() const { return *file_; }
  size_t size() const override { return static_cast<size_t>(file_->size()); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= file_->size()) return 0;
    n = static_cast<size_t>(std::min<uint64_t>(n, file_->size() - pos));
    file_->read(pos, n, buf);
    return n;
  }

 private:
  std::unique_ptr<RandomAccessFile> file_;
};

bool looks_like_text(const unsigned char* bytes, size_t size) {
  return std::all_of(bytes, bytes + size, [](unsigned char c) {
    return std::isprint(c) || std::isspace(c) || c >= 0x80;  // UTF-8 continues above 0x7f
  });
}

// Refuses, by what it is, a file that is not a zip archive.
void check_first_bytes(const std::string& path, const RandomAccessFile& file) {
  const uint64_t size = file.size();
  DIST_CHECK(size > 0, DataError, "TorchScript file '", path, "' is empty: ", kHowToSave);
  unsigned char head[16] = {};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(size, sizeof(head)));
  file.read(0, n, head);
  if (n >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0) return;
  uint64_t header_length = 0;
  for (int i = 7; i >= 0 && n >= 9; --i) header_length = (header_length << 8) | head[i];
  if (n >= 9 && head[8] == '{' && header_length + 8 <= size)
    throw DataError(detail::concat(
        "'", path,
        "' is a safetensors file, not a TorchScript file: it holds weights without the code "
        "that computes with them; ",
        kHowToSave));
  if (n >= 2 && head[0] == 0x80 && head[1] <= 5)
    throw DataError(detail::concat(
        "'", path,
        "' is a Python pickle (torch.save of PyTorch before 1.6, or pickle.dump), not a "
        "TorchScript file: ",
        kHowToSave));
  const char* kind = looks_like_text(head, n) ? "a text file" : "not a zip archive";
  throw DataError(detail::concat("'", path, "' is ", kind,
                                 ", not a TorchScript file (torch.jit.save writes a zip archive, "
                                 "which starts with \"PK\"): ",
                                 kHowToSave));
}

// The number after "with version " in the reader's message, or "" when it has none.
std::string version_in(const std::string& message) {
  std::smatch match;
  static const std::regex kVersion("file with version ([0-9]+)");
  return std::regex_search(message, match, kVersion) ? match[1].str() : "";
}

// Opens the zip archive's directory and version record, and checks that it holds TorchScript.
std::unique_ptr<caffe2::serialize::PyTorchStreamReader> check_archive(
    const std::string& path, std::shared_ptr<EnvReadAdapter> bytes) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(bytes);
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    if (message.find("maximum supported version") != std::string::npos)
      throw DataError(detail::concat(
          "TorchScript file '", path, "' was written by a newer PyTorch: its file format version ",
          version_in(message), " is above ", caffe2::serialize::kMaxSupportedFileFormatVersion,
          ", the highest this LibTorch (", TORCH_VERSION,
          ") reads; save the module with PyTorch 1.13 (Debian 12's python3-torch), the version "
          "of this LibTorch"));
    if (message.find("central directory") != std::string::npos)
      throw DataError(detail::concat(
          "TorchScript file '", path, "' is truncated: it starts as a zip archive but its end ",
          "(the archive's central directory) is missing, as after an interrupted copy or save; "
          "copy or save it again"));
    throw DataError(detail::concat("TorchScript file '", path,
                                   "' is a zip archive that PyTorch's reader refuses (", message,
                                   "): it is damaged; copy or save it again"));
  }
  const auto records = reader->getAllRecords();
  const bool has_code = std::any_of(records.begin(), records.end(),
                                    [](const std::string& r) { return r.rfind("code/", 0) == 0; });
  DIST_CHECK(has_code && reader->hasRecord("constants.pkl"), DataError, "'", path,
             "' is a zip archive of torch.save() (a state dict or a pickled module: tensors and "
             "Python references, no TorchScript code), not a TorchScript file: ",
             kHowToSave);
  return reader;
}

torch::jit::Module import_script(const std::string& path, std::shared_ptr<EnvReadAdapter> bytes) {
  try {
    return torch::jit::load(std::move(bytes), torch::Device(torch::kCPU));
  } catch (const DataError&) {
    throw;  // the file system failed: the Env's message names the file
  } catch (const std::exception& e) {
    const std::string message = first_line(e.what());
    const bool unknown = message.find("Unknown builtin op") != std::string::npos ||
                         message.find("Unknown type") != std::string::npos ||
                         message.find("schema") != std::string::npos;
    if (unknown)
      throw DataError(detail::concat(
          "TorchScript file '", path, "' uses what this LibTorch (", TORCH_VERSION,
          ") does not have (", message,
          "): it was probably written by a newer PyTorch; script and save the module with "
          "PyTorch 1.13 (Debian 12's python3-torch)"));
    throw DataError(detail::concat("TorchScript file '", path, "' cannot be loaded (", message,
                                   "): it is damaged, or was not written by torch.jit.save; ",
                                   kHowToSave));
  }
}

// What the strategies need of the module: a forward, something to train, no tensor twice.
void check_trainable(const std::string& path, const torch::jit::Module& script) {
  DIST_CHECK_ARG(script.find_method("forward").has_value(), "TorchScript module '", path,
                 "' has no forward method, which is what training calls; define forward in the "
                 "Python module (methods exported with @torch.jit.export are not called)");
  std::unordered_map<const void*, std::string> seen;
  bool trainable = false;
  for (const auto& p : script.named_parameters()) {
    auto [at, inserted] = seen.emplace(p.value.unsafeGetTensorImpl(), p.name);
    DIST_CHECK_ARG(inserted, "TorchScript module '", path, "' has one tensor under two parameter ",
                   "names, '", at->second, "' and '", p.name,
                   "' (tied weights): the strategies would sum its gradient twice; untie them "
                   "in Python (or train the module in Python)");
    // No optimizer steps an integer tensor, and the strategies would give it a gradient slot
    // and an update like any parameter's (one_device would train on, mirrored would fail).
    DIST_CHECK_ARG(p.value.is_floating_point() || p.value.is_complex(), "TorchScript module '",
                   path, "' has the ", p.value.scalar_type(), " parameter '", p.name,
                   "', which no optimizer can step (an integer or boolean tensor has no "
                   "gradient); in Python, register it as a buffer instead "
                   "(self.register_buffer('",
                   p.name.substr(p.name.rfind('.') + 1),
                   "', tensor)), as BatchNorm does its num_batches_tracked, and save the "
                   "module again");
    trainable = trainable || p.value.requires_grad();
  }
  DIST_CHECK_ARG(trainable, "TorchScript module '", path, "' has ",
                 seen.empty() ? "no parameters" : "no parameter that requires a gradient",
                 ", so training would change nothing; a module frozen with torch.jit.freeze or "
                 "optimize_for_inference keeps its weights as constants: save the module before "
                 "freezing it, and leave requires_grad on for the weights to train");
}

}  // namespace

TorchScriptModule load_torchscript(const std::string& path, Env* env) {
  DIST_CHECK(env->file_exists(path), DataError, "TorchScript file '", path,
             "' does not exist: check the path (a relative path is taken from the working "
             "directory)");
  // Named for what it is (a directory, a device, a FIFO: output_file.h says it), and never
  // opened: a FIFO would block the open.
  DIST_CHECK(!detail::exists_as_non_regular_file(path), DataError, "'", path, "' ",
             why_not_an_output_file(path), ": give the path of a file written by torch.jit.save");
  auto bytes = std::make_shared<EnvReadAdapter>(env->new_random_access_file(path));
  check_first_bytes(path, bytes->file());
  const ArchiveIndex index = verify_archive(path, bytes->file());
  auto reader = check_archive(path, bytes);
  torch::jit::Module script = import_script(path, bytes);
  verify_tensor_records(path, *reader, index);
  check_trainable(path, script);
  return TorchScriptModule(std::move(script), path);
}

}  // namespace dist::models
