// tfrecord_dataset: the records of TFRecord files as a dataset (tf.data.TFRecordDataset).
//
//   auto records = tfrecord_dataset(match_files("/data/train-*.tfrecord"));
//   auto examples = records.map(parse_and_decode, {kAutotune});
//
// Files are read one after another, streamed (memory does not grow with their size), every
// record's two CRCs checked. It is a file source: AutoShardPolicy::kFile gives worker i the
// files i, i + N, ...
#pragma once

#include <string>
#include <vector>

#include "dist/core/env.h"
#include "dist/data/dataset.h"
#include "dist/data/tfrecord.h"

namespace dist::data {

struct TFRecordOptions {
  Compression compression = Compression::kNone;
  // Read the files in another order every epoch, a function of (seed, epoch); the records
  // within a file keep their order (follow with shuffle() to mix them).
  bool shuffle_files = false;
  uint64_t seed = 0;
  // Elements {record, file, index} instead of {record}: the file's name (uint8 bytes, see
  // string_of) and the record's index in it (int64 scalar), so that a later stage can say
  // which record it could not use.
  bool with_source = false;
  // For a pipeline that skips bad records (ignore_errors() follows): a file whose framing is
  // damaged counts the records before the damage instead of failing the count, and its reading
  // delivers them, then throws the damage once (one error for the rest of the file).
  bool count_up_to_damage = false;
  // The file system the files are looked at and read through (env.h); not owned: it must
  // outlive the dataset and its iterators. A test passes one that injects faults.
  Env* env = Env::Default();
};

// Elements {record}: a 1-D uint8 tensor of each record's bytes. The files must exist and be
// regular files (DataError naming the file otherwise), checked now. The cardinality is found
// on first use by walking the record headers of every file once (an uncompressed file's data
// is seeked over; a compressed one is decompressed), and kept: once counted, every epoch reads
// exactly the records counted, so a file appended to while a job reads it does not change the
// epoch's length the job planned with (nor make it differ between workers).
//
// Errors while reading (a truncated record, a CRC that does not match) are DataErrors naming
// the file, the record's index and byte offset. Under ignore_errors() a record whose data's CRC
// does not match is skipped alone (its length was intact); damage to the framing (a truncated
// file, a length whose CRC fails) ends that file's reading: the rest of the file is skipped
// (one error counted) and the next file read.
Dataset tfrecord_dataset(std::vector<std::string> files, const TFRecordOptions& options = {});

}  // namespace dist::data
