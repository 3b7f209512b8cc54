// Verifying a TorchScript file's zip archive, for load_torchscript (torchscript_loading.cc).
//
// LibTorch 1.13 trusts the archive: it checks neither a record's CRC-32 nor that a tensor's
// record holds as many bytes as the tensor needs (a weight whose record was cut short reads on
// into whatever the heap holds: it trains, and is saved, on garbage), and it allocates what a
// deflated record declares before inflating it (a 3 MB file declaring gigabytes takes them).
// So, before torch::jit::load touches the file, verify_archive walks the zip itself (PKWARE's
// APPNOTE: end of central directory, zip64's if present, each central and local header) and
// checks every record's sizes and CRC-32; after the import, verify_tensor_records checks every
// tensor's storage against the size of the record it was read from.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "dist/core/env.h"

namespace caffe2::serialize {
class PyTorchStreamReader;
}

namespace dist::models {

// What a failed check tells the user to do.
constexpr const char* kHowToSave =
    "in Python, save the module with torch.jit.save(torch.jit.script(model), path) (or "
    "torch.jit.trace(model, example_batch) for a module that cannot be scripted)";

// The archive's records, as its central directory names them ("cnn/data/0"), with their
// (uncompressed) sizes, and the folder every name starts with ("cnn"; PyTorch's reader takes
// it from the first record's name and looks records up under it).
struct ArchiveIndex {
  std::string folder;
  std::map<std::string, uint64_t> sizes;
};

// Throws DataError naming `path`, the record and the sizes, before anything allocates what
// the archive declares: no end of central directory (a truncated file), a directory or a
// record outside the file, records that overlap, a name given twice, an encrypted record or a
// compression method other than stored and deflate, a stored record whose two sizes differ,
// deflated records declaring more than the file's size plus 64 MiB in all (a zip bomb), a
// record whose bytes do not give its CRC-32 and size. Handles zip64 (records and offsets past
// 4 GiB); refuses archives spanning several disks.
ArchiveIndex verify_archive(const std::string& path, const RandomAccessFile& file);

// Unpickles the module's data.pkl and constants.pkl again, matching each tensor's storage with
// the record it comes from (data/<key>, constants/<key>), and throws DataError naming `path`,
// the record and both sizes when a storage needs more bytes than its record holds, or names a
// record the archive lacks. `reader` is over the archive `index` describes.
void verify_tensor_records(const std::string& path, caffe2::serialize::PyTorchStreamReader& reader,
                           const ArchiveIndex& index);

}  // namespace dist::models
