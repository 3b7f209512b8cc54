#include "dist/train/summary_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <vector>

#include <ATen/ATen.h>

#include "core/crc32c.h"
#include "core/protobuf_wire.h"
#include "dist/core/error.h"
#include "dist/train/image_io.h"

namespace dist {
namespace {

using wire::kFixed32;
using wire::kFixed64;
using wire::kVarint;
using wire::put_bytes;
using wire::put_double;
using wire::put_fixed;
using wire::put_key;
using wire::put_packed_doubles;
using wire::put_varint;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// TensorBoard's default bucket edges, ascending: -DBL_MAX, the negatives of the positive edges
// (largest first), 0, the positive edges 1e-12 * 1.1^k below 1e20, DBL_MAX.
const std::vector<double>& default_bucket_edges() {
  static const std::vector<double> edges = [] {
    std::vector<double> positive;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) positive.push_back(v);
    positive.push_back(DBL_MAX);
    std::vector<double> all;
    for (auto it = positive.rbegin(); it != positive.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), positive.begin(), positive.end());
    return all;
  }();
  return edges;
}

// Event fields: 1 wall_time (double), 2 step (int64), 3 file_version (string), 5 summary.
std::string event(double wall_time, int64_t step) {
  std::string e;
  put_key(e, 1, kFixed64);
  put_fixed(e, wall_time);
  put_key(e, 2, kVarint);
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

SummaryWriter::SummaryWriter(const std::string& log_dir, Env* env) {
  DIST_CHECK_ARG(env != nullptr, "SummaryWriter('", log_dir, "'): the Env is null");
  env->create_dirs(log_dir);
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  path_ = detail::concat(log_dir, "/events.out.tfevents.", static_cast<int64_t>(now_seconds()), ".",
                         host, ".", ::getpid());
  file_ = env->new_writable_file(path_);
  std::string first = event(now_seconds(), 0);
  put_bytes(first, 3, "brain.Event:2");
  write_record(first);
  flush();
}

SummaryWriter::~SummaryWriter() {
  try {
    file_->close();
  } catch (const Error&) {
  }
}

void SummaryWriter::scalar(const std::string& tag, double value, int64_t step) {
  // Summary.Value: 1 tag (string), 2 simple_value (float).
  std::string summary_value;
  put_bytes(summary_value, 1, tag);
  put_key(summary_value, 2, kFixed32);
  put_fixed(summary_value, static_cast<float>(value));
  write_value(summary_value, step);
}

void SummaryWriter::image(const std::string& tag, const at::Tensor& image, int64_t step) {
  const std::string png = data::encode_png(image);  // checks the shape and dtype
  // Summary.Image: 1 height, 2 width (int32), 3 colorspace (int32: 1 grey, 3 RGB, 4 RGBA, the
  // channel count for the images encode_png takes), 4 encoded_image_string (bytes).
  const int64_t channels = image.dim() == 2 ? 1 : image.size(0);
  std::string summary_image;
  put_key(summary_image, 1, kVarint);
  put_varint(summary_image, static_cast<uint64_t>(image.size(-2)));
  put_key(summary_image, 2, kVarint);
  put_varint(summary_image, static_cast<uint64_t>(image.size(-1)));
  put_key(summary_image, 3, kVarint);
  put_varint(summary_image, static_cast<uint64_t>(channels));
  put_bytes(summary_image, 4, png);
  // Summary.Value: 1 tag (string), 4 image (Summary.Image).
  std::string summary_value;
  put_bytes(summary_value, 1, tag);
  put_bytes(summary_value, 4, summary_image);
  write_value(summary_value, step);
}

std::vector<std::string> SummaryWriter::weight_histograms(
    const std::vector<std::pair<std::string, at::Tensor>>& weights, int64_t step) {
  std::vector<std::string> refused;
  for (const auto& [name, weight] : weights) {
    if (!weight.is_floating_point()) continue;  // a counter is no weight (Keras' weights)
    std::string tag = name;
    std::replace(tag.begin(), tag.end(), '.', '/');
    try {
      histogram(tag, weight, step);
    } catch (const InvalidArgument& e) {
      refused.emplace_back(e.what());
    }
  }
  return refused;
}

void SummaryWriter::histogram(const std::string& tag, const at::Tensor& values, int64_t step) {
  const at::Tensor flat = values.detach().to(at::kDouble).contiguous().view(-1);
  const double* v = flat.data_ptr<double>();
  const int64_t n = flat.numel();
  const std::vector<double>& edges = default_bucket_edges();
  std::vector<double> counts(edges.size(), 0.0);
  double min = DBL_MAX, max = -DBL_MAX, sum = 0, sum_squares = 0;
  for (int64_t i = 0; i < n; ++i) {
    DIST_CHECK_ARG(std::isfinite(v[i]), "histogram '", tag, "': value ", i, " of ", n, " is ", v[i],
                   "; a histogram takes finite values only (the weights diverged?)");
    min = std::min(min, v[i]);
    max = std::max(max, v[i]);
    sum += v[i];
    sum_squares += v[i] * v[i];
    // The first edge above the value; DBL_MAX itself goes in the last bucket.
    const size_t b =
        static_cast<size_t>(std::upper_bound(edges.begin(), edges.end(), v[i]) - edges.begin());
    counts[std::min(b, edges.size() - 1)] += 1;
  }
  // Runs of empty buckets become one bucket ending where the run ends.
  std::vector<double> limits, buckets;
  for (size_t b = 0; b < edges.size(); ++b) {
    if (counts[b] == 0 && b + 1 < edges.size() && counts[b + 1] == 0) continue;
    limits.push_back(edges[b]);
    buckets.push_back(counts[b]);
  }
  // HistogramProto: 1 min, 2 max, 3 num, 4 sum, 5 sum_squares (double), 6 bucket_limit, 7 bucket
  // (packed doubles).
  std::string histo;
  put_double(histo, 1, min);
  put_double(histo, 2, max);
  put_double(histo, 3, static_cast<double>(n));
  put_double(histo, 4, sum);
  put_double(histo, 5, sum_squares);
  put_packed_doubles(histo, 6, limits);
  put_packed_doubles(histo, 7, buckets);
  // Summary.Value: 1 tag (string), 5 histo (HistogramProto).
  std::string summary_value;
  put_bytes(summary_value, 1, tag);
  put_bytes(summary_value, 5, histo);
  write_value(summary_value, step);
}

void SummaryWriter::write_value(const std::string& summary_value, int64_t step) {
  // Summary: 1 value (repeated Summary.Value).
  std::string summary;
  put_bytes(summary, 1, summary_value);
  std::string e = event(now_seconds(), step);
  put_bytes(e, 5, summary);
  write_record(e);
}

void SummaryWriter::flush() { file_->flush(); }

void SummaryWriter::write_record(const std::string& event) {
  std::string record;
  put_fixed(record, static_cast<uint64_t>(event.size()));
  put_fixed(record, masked_crc32c(record.data(), 8));
  record += event;
  put_fixed(record, masked_crc32c(event.data(), event.size()));
  file_->append(record.data(), record.size());
}

}  // namespace dist
