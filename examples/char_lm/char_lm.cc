// A character language model from Python trained under MultiWorkerMirroredStrategy: a small
// GPT (examples/python/char_lm.py, scripted with torch.jit.script) learns the next byte of the
// lines of a text, read from TFRecord shards of tf.train.Example token lists of uneven length,
// batched with padding; its loss is the mean over the real (non-padding) tokens of the GLOBAL
// batch (dist/train/sequence_loss.h). docs/guide.md, "Sequences", walks through it.
//
//   char_lm prepare TEXT DATA_DIR [SHARDS=4] [MAX_LEN=128]
//       The lines of TEXT (2 bytes or more, split every MAX_LEN + 1 bytes) as token ids: every
//       10th line to DATA_DIR/eval.tfrecord, the rest to SHARDS train-*.tfrecord shards, each
//       record a tf.train.Example with an int64 list "tokens". DATA_DIR/vocab.bin holds the
//       vocabulary: the distinct bytes of the lines, token id i = its i-th byte.
//   char_lm train MODEL.pt DATA_DIR OUT_DIR [STEPS=300] [BATCH=16]
//       Trains MODEL.pt (`char_lm.py model DATA_DIR/vocab.bin MODEL.pt`) for STEPS steps of
//       BATCH sequences per worker (Adam 3e-3), on the workers of TF_CONFIG (without it, this
//       process alone, under OneDeviceStrategy), then evaluates it on eval.tfrecord. The chief
//       writes for Python:
//         OUT_DIR/trained.pt                 the trained module (torch.jit.load reads it)
//         OUT_DIR/eval_inputs.i64, eval_targets.i64   the evaluation's padded batch, raw int64
//         OUT_DIR/eval.json                  their shape, the padding id and the loss printed
//       and Python computes the same loss and samples text:
//         /usr/bin/python3 examples/python/char_lm.py sample OUT_DIR/trained.pt
//             DATA_DIR/vocab.bin --eval OUT_DIR
//
// Two workers on this machine (each its own process; TF_CONFIG as in docs/guide.md):
//   TF_CONFIG='{"cluster":{"worker":["127.0.0.1:20000","127.0.0.1:20001"]},
//               "task":{"type":"worker","index":0}}' char_lm train ... &
//   TF_CONFIG='{... "index":1}}' char_lm train ...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dist/data/example.h"
#include "dist/data/files.h"
#include "dist/data/tfrecord.h"
#include "dist/data/tfrecord_dataset.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/models/torchscript_model.h"
#include "dist/models/torchscript_signature.h"
#include "dist/train/sequence_loss.h"
#include "example_args.h"

namespace {

constexpr const char* kUsage =
    "char_lm prepare TEXT DATA_DIR [SHARDS=4] [MAX_LEN=128]\n"
    "       char_lm train MODEL.pt DATA_DIR OUT_DIR [STEPS=300] [BATCH=16]";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw examples::UsageError("cannot read '" + path + "'");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out.flush()) throw std::runtime_error("cannot write '" + path + "'");
}

// ---- prepare: the text as TFRecord shards of token lists ------------------------------------

// The text's lines of 2 bytes or more (trailing spaces dropped), each cut into pieces of at
// most max_len + 1 bytes (a piece of n bytes is n - 1 next-byte predictions).
std::vector<std::string> lines_of(const std::string& text, int64_t max_len) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    line.erase(line.find_last_not_of(" \t\r") + 1);
    for (size_t at = 0; at + 2 <= line.size(); at += static_cast<size_t>(max_len) + 1)
      lines.push_back(line.substr(at, static_cast<size_t>(max_len) + 1));
    start = end + 1;
  }
  return lines;
}

int prepare(int argc, char** argv) {
  if (argc < 4 || argc > 6) throw examples::UsageError("prepare takes TEXT and DATA_DIR");
  const std::string text_path = argv[2], dir = argv[3];
  const int64_t shards = argc > 4 ? examples::parse_int(argv[4], "SHARDS", 1) : 4;
  const int64_t max_len = argc > 5 ? examples::parse_int(argv[5], "MAX_LEN", 1) : 128;
  const std::vector<std::string> lines = lines_of(read_file(text_path), max_len);
  if (lines.size() < 10)
    throw examples::UsageError("'" + text_path + "' has fewer than 10 lines of 2 bytes or more");
  std::set<unsigned char> bytes;
  for (const auto& line : lines) bytes.insert(line.begin(), line.end());
  const std::string vocabulary(bytes.begin(), bytes.end());
  std::filesystem::create_directories(dir);
  write_file(dir + "/vocab.bin", vocabulary.data(), vocabulary.size());

  std::vector<std::unique_ptr<dist::data::TFRecordWriter>> train;
  for (int64_t s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "/train-%05lld-of-%05lld.tfrecord", static_cast<long long>(s),
                  static_cast<long long>(shards));
    train.push_back(std::make_unique<dist::data::TFRecordWriter>(dir + name));
  }
  dist::data::TFRecordWriter eval(dir + "/eval.tfrecord");
  int64_t train_lines = 0, tokens = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<int64_t> ids;
    for (unsigned char c : lines[i]) ids.push_back(static_cast<int64_t>(vocabulary.find(c)));
    tokens += static_cast<int64_t>(ids.size());
    const std::string record =
        dist::data::ExampleBuilder().add_int64("tokens", std::move(ids)).serialize();
    if (i % 10 == 0) {
      eval.write(record);
    } else {
      train[static_cast<size_t>(train_lines++ % shards)]->write(record);
    }
  }
  for (auto& writer : train) writer->close();
  eval.close();
  std::printf(
      "Wrote %lld training and %lld evaluation sequences (%lld tokens, %zu distinct "
      "bytes) to %s\n",
      static_cast<long long>(train_lines), static_cast<long long>(lines.size()) - train_lines,
      static_cast<long long>(tokens), vocabulary.size(), dir.c_str());
  return 0;
}

// ---- train ----------------------------------------------------------------------------------

// Sequences of token ids from TFRecords of tf.train.Example, as named components: "tokens",
// the ids without their last, and "targets", the ids without their first (the byte each
// position predicts).
dist::data::Dataset sequences(const std::vector<std::string>& files) {
  const dist::data::FeatureSpec spec(
      {dist::data::VarLenFeature("tokens", dist::data::FeatureType::kInt64)});
  const auto names = dist::data::Element::make_names({"tokens", "targets"});
  return dist::data::tfrecord_dataset(files).map([spec, names](dist::data::Element record) {
    const at::Tensor ids =
        dist::data::parse_example(dist::data::bytes_view(record[0]), spec)["tokens"];
    return dist::data::Element({ids.slice(0, 0, -1), ids.slice(0, 1)}, names);
  });
}

// A sequence longer than the model accepts is named before anything trains, with its file and
// record: the module's `max_len` attribute (its position embedding's rows, when it has one)
// against every sequence of `files` (inputs: a record of n tokens gives n - 1). Without the
// check the forward would fail mid-epoch at the first long batch, naming no record.
void check_sequence_lengths(const dist::models::TorchScriptModule& script,
                            const std::vector<std::string>& files) {
  const torch::jit::Module& module = script->script();
  if (!module.hasattr("max_len")) return;
  const int64_t max_len = module.attr("max_len").toInt();
  const dist::data::FeatureSpec spec(
      {dist::data::VarLenFeature("tokens", dist::data::FeatureType::kInt64)});
  dist::data::TFRecordOptions read;
  read.with_source = true;  // {record, file, index}
  for (const auto& e : dist::data::tfrecord_dataset(files, read).iterator()) {
    const int64_t inputs =
        dist::data::parse_example(dist::data::bytes_view(e[0]), spec)["tokens"].numel() - 1;
    if (inputs > max_len)
      throw std::runtime_error(
          "record " + std::to_string(e[2].item<int64_t>()) + " of " + dist::data::string_of(e[1]) +
          " is a sequence of " + std::to_string(inputs) +
          " inputs, longer than the model's max_len of " + std::to_string(max_len) +
          ": prepare the data with MAX_LEN " + std::to_string(max_len) +
          " (char_lm prepare TEXT DATA_DIR SHARDS MAX_LEN), or give the model a larger max_len");
  }
}

// Batches of `size` sequences padded to the longest (tokens with 0, targets with the padding
// id), with a "mask": true at the real tokens. The model's forward(tokens, mask) takes its
// arguments from the components of these names; it leaves "targets" to the loss.
dist::data::Dataset padded_batches(const dist::data::Dataset& sequences, int64_t size,
                                   int64_t padding_id, bool drop_remainder) {
  const auto names = dist::data::Element::make_names({"tokens", "mask", "targets"});
  return sequences.padded_batch(size, {}, {0, padding_id}, drop_remainder)
      .map([padding_id, names](dist::data::Element b) {
        const at::Tensor& targets = b["targets"];
        return dist::data::Element({b["tokens"], targets.ne(padding_id), targets}, names);
      });
}

// Every worker runs the same pipeline and keeps its rows of each global batch (kData): the job
// sees the batches one device would. Padding: inputs with 0 (masked in attention, and causal
// attention never looks ahead at them), targets with the padding id.
dist::DistributedDataset training_batches(const dist::Strategy& strategy,
                                          const std::string& data_dir, int64_t global_batch,
                                          int64_t padding_id) {
  const dist::data::Dataset train_batches =
      padded_batches(sequences(dist::data::match_files(data_dir + "/train-*.tfrecord"))
                         .shuffle(4096, /*seed=*/1)
                         .repeat(),
                     global_batch, padding_id, /*drop_remainder=*/true)
          .prefetch();
  dist::DistributeOptions options;
  options.auto_shard_policy = dist::AutoShardPolicy::kData;
  return strategy.experimental_distribute_dataset(train_batches, options);
}

// The module, checked once on a real batch before anything trains: what the forward was
// called with and what came back.
dist::models::TorchScriptModule checked_module(const dist::Strategy& strategy,
                                               const std::string& model_path,
                                               const std::string& data_dir, int64_t batch,
                                               int64_t vocabulary) {
  const int64_t padding_id = vocabulary;
  dist::models::TorchScriptModule script = dist::models::load_torchscript(model_path);
  std::vector<std::string> all_files = dist::data::match_files(data_dir + "/train-*.tfrecord");
  all_files.push_back(data_dir + "/eval.tfrecord");
  check_sequence_lengths(script, all_files);
  const dist::data::Element first =
      *padded_batches(sequences({data_dir + "/eval.tfrecord"}), batch, padding_id, false)
           .iterator()
           .next();
  const auto report = dist::models::check_forward(*script, first);
  if (strategy.is_chief()) std::cout << "Start-up check: " << report.description << std::endl;
  const at::Tensor logits = report.outputs.at("output");
  if (logits.dim() != 3 || logits.size(2) != vocabulary)
    throw std::runtime_error("the model's logits are " + report.description +
                             "; expected [batch, time, " + std::to_string(vocabulary) +
                             "] for the vocabulary of " + data_dir + "/vocab.bin");
  return script;
}

// `steps` training steps (fewer if the data ends), the loss printed every 50.
void train_steps(const dist::Strategy& strategy,
                 dist::Mirrored<dist::models::TorchScriptModule>& model,
                 dist::MirroredOptimizer& optimizer, const dist::SequenceCrossentropy& loss_fn,
                 const dist::DistributedDataset& train_data, int64_t steps, int64_t global_batch) {
  model.train();
  const auto started = std::chrono::steady_clock::now();
  int64_t step = 0;
  for (const auto& per_replica : train_data.iterator()) {
    auto losses = strategy.run(
        [&](const dist::data::Element& b) {
          // forward(tokens, mask) from b["tokens"] and b["mask"]
          const at::Tensor logits = dist::models::forward_tensor(*model, b);
          // The replica's token losses over the GLOBAL batch's real tokens (all-reduced).
          at::Tensor loss = loss_fn(b["targets"], logits, b["mask"]);
          loss.backward();
          optimizer.apply_gradients();
          return loss.detach();
        },
        per_replica);
    ++step;
    const double loss = strategy.reduce(dist::ReduceOp::kSum, losses).item<double>();
    if (strategy.is_chief() && (step % 50 == 0 || step == 1 || step == steps))
      std::printf("step %lld: loss %.4f\n", static_cast<long long>(step), loss);
    if (step == steps) break;
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
  if (strategy.is_chief())
    std::printf("Trained %lld steps in %.1f s (%.0f sequences/s)\n", static_cast<long long>(step),
                took.count(), static_cast<double>(step * global_batch) / took.count());
}

// The trained module and the evaluation batch with its loss, for Python to read back.
void write_results(dist::models::TorchScriptModuleImpl& trained, const dist::data::Element& eval,
                   double eval_loss, int64_t padding_id, const std::string& data_dir,
                   const std::string& out_dir) {
  std::filesystem::create_directories(out_dir);
  dist::models::save_torchscript(trained, out_dir + "/trained.pt");
  const at::Tensor inputs = eval["tokens"].contiguous(), targets = eval["targets"].contiguous();
  write_file(out_dir + "/eval_inputs.i64", inputs.data_ptr(), inputs.nbytes());
  write_file(out_dir + "/eval_targets.i64", targets.data_ptr(), targets.nbytes());
  char meta[256];
  const int length =
      std::snprintf(meta, sizeof(meta),
                    "{\"rows\": %lld, \"time\": %lld, \"padding_id\": %lld, \"loss\": %.9g}\n",
                    static_cast<long long>(inputs.size(0)), static_cast<long long>(inputs.size(1)),
                    static_cast<long long>(padding_id), eval_loss);
  write_file(out_dir + "/eval.json", meta, static_cast<size_t>(length));
  std::cout << "Wrote " << out_dir << "/trained.pt; in Python:\n  /usr/bin/python3 "
            << "examples/python/char_lm.py sample " << out_dir << "/trained.pt " << data_dir
            << "/vocab.bin --eval " << out_dir << std::endl;
}

// The evaluation: every eval sequence in one padded batch, on the chief's copy, which the chief
// then writes out.
void evaluate_and_write(const dist::Strategy& strategy,
                        dist::Mirrored<dist::models::TorchScriptModule>& model,
                        const dist::SequenceCrossentropy& loss_fn, int64_t padding_id,
                        const std::string& data_dir, const std::string& out_dir) {
  model.eval();
  torch::NoGradGuard no_grad;
  const dist::data::Element eval =
      *padded_batches(sequences({data_dir + "/eval.tfrecord"}), 1 << 20, padding_id, false)
           .iterator()
           .next();
  dist::models::TorchScriptModuleImpl& trained = *model;  // outside run(): the primary
  const at::Tensor eval_logits = dist::models::forward_tensor(trained, eval);
  const double eval_loss = loss_fn(eval["targets"], eval_logits, eval["mask"]).item<double>();
  if (!strategy.is_chief()) return;
  std::printf("Eval loss %.6f over %lld tokens of %lld sequences\n", eval_loss,
              static_cast<long long>(eval["mask"].sum().item<int64_t>()),
              static_cast<long long>(eval["tokens"].size(0)));
  write_results(trained, eval, eval_loss, padding_id, data_dir, out_dir);
}

int train(int argc, char** argv) {
  if (argc < 5 || argc > 7)
    throw examples::UsageError("train takes MODEL.pt, DATA_DIR and OUT_DIR");
  const std::string model_path = argv[2], data_dir = argv[3], out_dir = argv[4];
  const int64_t steps = argc > 5 ? examples::parse_int(argv[5], "STEPS", 1) : 300;
  const int64_t batch = argc > 6 ? examples::parse_int(argv[6], "BATCH", 1) : 16;

  // One replica per worker, the workers of TF_CONFIG; without it, this process alone.
  const dist::Strategy strategy = std::getenv("TF_CONFIG") != nullptr
                                      ? dist::Strategy(dist::MultiWorkerMirroredStrategy())
                                      : dist::Strategy(dist::OneDeviceStrategy("cpu:0"));
  const int64_t vocabulary = static_cast<int64_t>(read_file(data_dir + "/vocab.bin").size());
  const int64_t padding_id = vocabulary;  // not a token: padded targets are told apart by it
  const int64_t global_batch = batch * strategy.num_replicas_in_sync();
  auto train_data = training_batches(strategy, data_dir, global_batch, padding_id);
  dist::models::TorchScriptModule script =
      checked_module(strategy, model_path, data_dir, batch, vocabulary);

  auto model = strategy.mirror(script);
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(3e-3));
  const dist::SequenceCrossentropy loss_fn(padding_id);
  if (strategy.is_chief())
    std::cout << "Training " << model_path << " on " << strategy.num_workers()
              << (strategy.num_workers() == 1 ? " worker, " : " workers, ") << global_batch
              << " sequences a step" << std::endl;
  train_steps(strategy, model, *optimizer, loss_fn, train_data, steps, global_batch);
  evaluate_and_write(strategy, model, loss_fn, padding_id, data_dir, out_dir);
  return 0;
}

int run(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "prepare") return prepare(argc, argv);
  if (command == "train") return train(argc, argv);
  throw examples::UsageError(command.empty() ? "a command is required"
                                             : "unknown command '" + command + "'");
}

}  // namespace

int main(int argc, char** argv) {
  return examples::run_main(kUsage, [&] { return run(argc, argv); });
}
