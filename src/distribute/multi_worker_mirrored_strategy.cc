// MultiWorkerMirroredStrategy: MirroredExtended's replica threads in each worker process, plus
// a GlooCommunicator between the processes. Every cross-worker step happens in exactly one
// thread per worker (the last local replica to arrive at a barrier), so each worker makes the
// same sequence of Gloo calls.
#include "dist/distribute/multi_worker_mirrored_strategy.h"

#include <sstream>

#include "collective/gloo_communicator.h"
#include "collective/ordered_communicator.h"
#include "dist/core/cross_worker_sum.h"
#include "dist/distribute/batch_split.h"
#include "distribute/mirrored_extended.h"

namespace dist {
namespace {

MirroredOptions local_options(const MultiWorkerOptions& options) {
  DIST_CHECK_ARG(options.replicas_per_worker >= 1, "replicas_per_worker must be at least 1, got ",
                 options.replicas_per_worker);
  DIST_CHECK_ARG(
      options.communication.implementation != CommunicationOptions::Implementation::kNccl,
      "CommunicationOptions::Implementation::kNccl needs a CUDA build "
      "(DIST_WITH_CUDA) with GPUs; on CPU use kAuto or kRing (Gloo over TCP)");
  DIST_CHECK_ARG(options.communication.timeout.count() > 0,
                 "communication timeout must be positive");
  DIST_CHECK_ARG(options.communication.rendezvous_timeout.count() > 0,
                 "rendezvous timeout must be positive");
  MirroredOptions local;
  local.devices = {};
  for (int r = 0; r < options.replicas_per_worker; ++r)
    local.devices.push_back("cpu:" + std::to_string(r));
  local.threads_per_replica = options.threads_per_replica;
  local.bytes_per_pack = options.communication.bytes_per_pack;
  local.collective_timeout = options.communication.timeout;
  return local;
}

// One line per parameter and buffer: "name shape dtype".
std::vector<std::string> model_signature(const torch::nn::Module& module) {
  std::vector<std::string> lines;
  auto describe = [](const std::string& kind, const std::string& name, const at::Tensor& t) {
    std::ostringstream line;
    line << kind << " '" << name << "' " << t.sizes() << " " << t.scalar_type();
    return line.str();
  };
  for (const auto& p : module.named_parameters())
    lines.push_back(describe("parameter", p.key(), p.value()));
  for (const auto& b : module.named_buffers())
    lines.push_back(describe("buffer", b.key(), b.value()));
  return lines;
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class MultiWorkerExtended : public MirroredExtended {
 public:
  MultiWorkerExtended(const MultiWorkerOptions& options, ClusterConfig config)
      : MirroredExtended("multi_worker", local_options(options)),
        config_(std::move(config)),
        overlap_(options.communication.overlap_with_backward) {
    collective::GlooOptions gloo;
    gloo.collective_timeout = options.communication.timeout;
    gloo.rendezvous_timeout = options.communication.rendezvous_timeout;
    gloo_ = std::make_unique<collective::GlooCommunicator>(config_.cluster, config_.task, gloo);
    communicator_ = std::make_unique<collective::OrderedCommunicator>(
        *gloo_, [this] { complete_reducer_steps(); });
    // Every worker must hold the same number of replicas (equal shares of each batch).
    auto counts =
        communicator_->exchange("replicas_per_worker", std::to_string(num_local_replicas()));
    for (size_t w = 0; w < counts.size(); ++w)
      DIST_CHECK(counts[w] == counts[0], CollectiveError,
                 "replica count mismatch: ", communicator_->member_name(static_cast<int>(w)),
                 " has ", counts[w], " replicas per worker but ", communicator_->member_name(0),
                 " has ", counts[0], "; start every worker with the same replicas_per_worker");
    group().set_cross_worker(communicator_.get(), num_local_replicas() * communicator_->size());
    // Metrics read in cross-replica code sum their state over the workers too.
    set_cross_worker_sum([this](std::pair<double, double> local) {
      auto t = at::tensor({local.first, local.second}, at::kDouble);
      std::vector<at::Tensor> both{t};
      communicator_->all_reduce(both, ReduceOp::kSum);
      return std::make_pair(t[0].item<double>(), t[1].item<double>());
    });
  }

  ~MultiWorkerExtended() override { set_cross_worker_sum(nullptr); }

  int num_input_pipelines() const override { return communicator_->size(); }
  int input_pipeline_id() const override { return communicator_->rank(); }
  const ClusterConfig& config() const { return config_; }
  int rank() const { return communicator_->rank(); }
  int size() const { return communicator_->size(); }

  at::Tensor reduce(ReduceOp op, const std::vector<at::Tensor>& values,
                    std::optional<int64_t> axis) override {
    int64_t count = 0;
    std::vector<at::Tensor> partial{reduce_locally(op, values, axis, &count).contiguous()};
    communicator_->all_reduce(partial, op == ReduceOp::kMean ? ReduceOp::kSum : op);
    if (op != ReduceOp::kMean) return partial[0];
    std::vector<at::Tensor> total{at::tensor({count}, at::kLong)};
    communicator_->all_reduce(total, ReduceOp::kSum);
    return partial[0] / static_cast<double>(total[0].item<int64_t>());
  }

  at::Tensor gather(const std::vector<at::Tensor>& values, int64_t axis) override {
    return collective::gather_across_workers(*communicator_, at::cat(values, axis), axis);
  }

  PerReplica<data::Element> distribute_batch(const data::Element& batch,
                                             AutoShardPolicy policy) const override {
    if (policy == AutoShardPolicy::kOff || policy == AutoShardPolicy::kFile)
      return MirroredExtended::distribute_batch(batch, policy);
    // kData / kAuto: this worker's replicas are replicas [rank*R, rank*R + R) of the job.
    const int local = num_local_replicas();
    std::vector<data::Element> shares;
    for (int r = 0; r < local; ++r)
      shares.push_back(batch_share(batch, first_replica_id() + r, num_replicas_in_sync()));
    return PerReplica<data::Element>(std::move(shares), batch.at(0).size(0));
  }

  bool any_worker(bool local) const override {
    std::vector<at::Tensor> flag{at::tensor({local ? int64_t{1} : 0}, at::kLong)};
    communicator_->all_reduce(flag, ReduceOp::kMax);
    return flag[0].item<int64_t>() > 0;
  }

  std::pair<bool, int64_t> agree_step(bool has_data, int64_t local_examples) const override {
    std::vector<at::Tensor> flags{
        at::tensor({has_data ? int64_t{1} : 0, local_examples}, at::kLong)};
    communicator_->all_reduce(flags, ReduceOp::kSum);
    return {flags[0][0].item<int64_t>() > 0, flags[0][1].item<int64_t>()};
  }

 protected:
  int worker_rank() const override { return communicator_->rank(); }
  int num_workers() const override { return communicator_->size(); }

  bool overlap_with_backward() const override { return overlap_; }

  void average_buffers_across_workers(std::vector<at::Tensor>& means) override {
    communicator_->all_reduce(means, ReduceOp::kMean);  // ordered after the step's packs
  }

  void reduce_pack_across_workers(std::vector<at::Tensor>& pack) override {
    gloo_->all_reduce(pack, ReduceOp::kSum);  // the packs themselves keep their own order
  }

  void synchronize_initial_values(detail::MirroredVariables& variables) override {
    check_same_model(*variables.replicas[0]);
    // The chief's initial values win everywhere.
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> tensors;
    for (const auto& p : variables.replicas[0]->parameters()) tensors.push_back(p.detach());
    for (const auto& b : variables.replicas[0]->buffers()) tensors.push_back(b);
    communicator_->broadcast(tensors, 0);
    auto primary_buffers = variables.replicas[0]->buffers();
    for (size_t r = 1; r < variables.replicas.size(); ++r) {
      auto buffers = variables.replicas[r]->buffers();
      for (size_t b = 0; b < buffers.size(); ++b) buffers[b].copy_(primary_buffers[b]);
    }
  }

 private:
  // Every worker compares every worker's model with the chief's, so all of them fail
  // together with the same message, before the first step.
  void check_same_model(const torch::nn::Module& model) {
    auto signatures = communicator_->exchange("model/" + std::to_string(models_mirrored_++),
                                              join(model_signature(model)));
    auto reference = split_lines(signatures[0]);
    for (size_t w = 1; w < signatures.size(); ++w) {
      auto mine = split_lines(signatures[w]);
      for (size_t i = 0; i < std::max(mine.size(), reference.size()); ++i) {
        std::string theirs = i < mine.size() ? mine[i] : "(nothing)";
        std::string chiefs = i < reference.size() ? reference[i] : "(nothing)";
        if (theirs != chiefs)
          throw CollectiveError(detail::concat(
              "model mismatch before step 1: ", communicator_->member_name(static_cast<int>(w)),
              " has ", theirs, " where ", communicator_->member_name(0), " has ", chiefs,
              "; every worker must build the same model"));
      }
    }
  }

  ClusterConfig config_;
  bool overlap_;
  std::unique_ptr<collective::GlooCommunicator> gloo_;
  // Every collective but the gradient packs: sends a step's packs first (see
  // OrderedCommunicator).
  std::unique_ptr<collective::OrderedCommunicator> communicator_;
  int models_mirrored_ = 0;
};

MultiWorkerExtended& extended_of(const Strategy& strategy) {
  return static_cast<MultiWorkerExtended&>(strategy.extended());
}

}  // namespace

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy()
    : MultiWorkerMirroredStrategy(MultiWorkerOptions{}) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(MultiWorkerOptions options)
    : Strategy(std::make_shared<MultiWorkerExtended>(
          options, options.cluster ? *options.cluster : cluster_config_from_environment())) {}

const TaskSpec& MultiWorkerMirroredStrategy::task() const {
  return extended_of(*this).config().task;
}
bool MultiWorkerMirroredStrategy::is_chief() const { return extended_of(*this).rank() == 0; }
int MultiWorkerMirroredStrategy::num_workers() const { return extended_of(*this).size(); }
int MultiWorkerMirroredStrategy::worker_rank() const { return extended_of(*this).rank(); }

}  // namespace dist
