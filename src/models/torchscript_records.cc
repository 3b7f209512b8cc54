// verify_tensor_records (torchscript_archive.h): which record each tensor was read from.
//
// A pickle names a tensor's storage by a key ("3": record data/3) with its element count; LibTorch
// makes the storage that many elements long over whatever the record held. To see each storage
// beside its record, the pickles are read again by LibTorch's own unpickler, with a record
// reader of ours: it hands out, per key, a buffer of the record's size (allocated, never
// touched: no tensor byte is read) and remembers which buffer went to which record. Each
// storage the unpickler builds holds one of those buffers, so its record is known, and its
// byte size (elements x element size) must not exceed the record's. Classes are resolved to
// empty stand-ins: only the tensors in their state matter here.
#include <ATen/core/ivalue.h>
#include <c10/core/CPUAllocator.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/script_type_parser.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "dist/core/error.h"
#include "models/torchscript_archive.h"

namespace dist::models {
namespace {

// Every class name a pickle mentions ("__torch__.Net", also inside "List[__torch__.Net]")
// becomes an empty class of its own.
class StandInClasses : public torch::jit::Resolver {
 public:
  c10::TypePtr resolveType(const std::string& name, const torch::jit::SourceRange&) override {
    if (auto known = unit_->get_type(c10::QualifiedName(name))) return known;
    auto type = c10::ClassType::create(c10::QualifiedName(name), unit_);
    unit_->register_type(type);
    return type;
  }
  const std::shared_ptr<torch::jit::CompilationUnit>& unit() const { return unit_; }

 private:
  std::shared_ptr<torch::jit::CompilationUnit> unit_ =
      std::make_shared<torch::jit::CompilationUnit>();
};

struct GivenRecord {
  std::string name;
  uint64_t size;
};

class RecordMatcher {
 public:
  RecordMatcher(const std::string& path, caffe2::serialize::PyTorchStreamReader& reader,
                const ArchiveIndex& index)
      : path_(path), reader_(reader), index_(index) {}

  void check_records_under(const std::string& archive) {
    auto [pickle, size] = reader_.getRecord(archive + ".pkl");
    const char* bytes = static_cast<const char*>(pickle.get());
    size_t at = 0;
    auto read = [&](char* out, size_t count) {
      count = std::min(count, size - at);
      std::memcpy(out, bytes + at, count);
      at += count;
      return count;
    };
    auto classes = std::make_shared<StandInClasses>();
    torch::jit::ScriptTypeParser parser(classes);
    auto resolve = [&](const c10::QualifiedName& name) {
      return c10::StrongTypePtr(classes->unit(), parser.parseType(name.qualifiedName()));
    };
    auto load_object = [&](const c10::StrongTypePtr& type, const c10::IValue& state) {
      check_tensors_in(state);
      return c10::ivalue::Object::create(type, 0);
    };
    auto give_record = [&, archive](const std::string& key) { return give(archive + "/" + key); };
    torch::jit::Unpickler unpickler(read, resolve, load_object, give_record, at::Device(at::kCPU));
    unpickler.set_version(reader_.version());
    check_tensors_in(unpickler.parse_ivalue());
  }

 private:
  at::DataPtr give(const std::string& record) {
    const auto found = index_.sizes.find(index_.folder + "/" + record);
    DIST_CHECK(found != index_.sizes.end(), DataError, "TorchScript file '", path_,
               "' is damaged: a tensor in it refers to the record '", record,
               "', which the archive does not hold; ", kHowToSave);
    at::DataPtr buffer = c10::GetCPUAllocator()->allocate(std::max<uint64_t>(found->second, 1));
    given_[buffer.get()] = {record, found->second};
    return buffer;
  }

  void check_tensors_in(const c10::IValue& value) {
    value.visit([&](const c10::IValue& item) {
      if (item.isTensor()) check_tensor(item.toTensor());
      return false;  // on into lists, tuples, dicts and objects
    });
  }

  void check_tensor(const at::Tensor& tensor) {
    if (!tensor.defined()) return;
    if (tensor.is_sparse()) {
      check_tensor(tensor._indices());
      check_tensor(tensor._values());
      return;
    }
    if (!tensor.has_storage()) return;
    const c10::StorageImpl& storage = *tensor.storage().unsafeGetStorageImpl();
    const auto found = given_.find(storage.data_ptr().get());
    if (found == given_.end()) return;  // no record: an empty tensor
    const GivenRecord& record = found->second;
    DIST_CHECK(storage.nbytes() <= record.size, DataError, "TorchScript file '", path_,
               "' is damaged: its record '", record.name, "' holds ", record.size,
               " bytes, but the ", tensor.scalar_type(), " tensor ", tensor.sizes(),
               " stored there needs ", storage.nbytes(),
               " (the record was cut short after torch.jit.save wrote it); copy the file again "
               "from where it was written, or ",
               kHowToSave);
  }

  const std::string& path_;
  caffe2::serialize::PyTorchStreamReader& reader_;
  const ArchiveIndex& index_;
  std::unordered_map<const void*, GivenRecord> given_;
};

}  // namespace

void verify_tensor_records(const std::string& path, caffe2::serialize::PyTorchStreamReader& reader,
                           const ArchiveIndex& index) {
  RecordMatcher matcher(path, reader, index);
  for (const char* archive : {"constants", "data"}) {
    if (!reader.hasRecord(std::string(archive) + ".pkl")) continue;
    try {
      matcher.check_records_under(archive);
    } catch (const DataError&) {
      throw;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      throw DataError(detail::concat("TorchScript file '", path, "': the tensors of its ", archive,
                                     ".pkl could not be matched with their records (",
                                     what.substr(0, what.find('\n')),
                                     "), so their sizes are unchecked; ", kHowToSave));
    }
  }
}

}  // namespace dist::models
