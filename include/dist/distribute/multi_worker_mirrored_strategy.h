// MultiWorkerMirroredStrategy: synchronous data parallelism across processes and hosts.
//
// Every worker process runs the same program. The cluster comes from TF_CONFIG, Slurm or MPI
// (resolve_cluster in cluster_resolver.h), or an explicit ClusterConfig; collective rank 0 (the
// chief, or worker 0) hosts the rendezvous store. Each worker holds `replicas_per_worker` local
// replicas: gradients are reduced in process first, then across workers over Gloo (TCP), then
// applied once per worker, so all copies everywhere stay identical
// (tf.distribute.MultiWorkerMirroredStrategy).
//
// Start-up (in strategy.mirror): the chief's initial values are broadcast, and every worker
// checks that all workers built the same model (parameter names, shapes, dtypes); a mismatch
// fails every worker before step 1, naming the worker and the first differing parameter.
//
// Faults: a worker that dies or stalls makes every other worker fail within
// `communication.timeout` with a CollectiveError naming the lost worker; one that never
// starts makes the others fail within `communication.rendezvous_timeout`.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "dist/distribute/cluster_spec.h"
#include "dist/distribute/communication_hook.h"
#include "dist/distribute/mirrored_strategy.h"

namespace dist {

struct CommunicationOptions {
  // The collective backend between the worker processes, by name: "gloo" (Gloo over TCP,
  // through LibTorch's c10d), or "mpi" (MPI's nonblocking collectives, for workers started by
  // mpirun: one MPI process per worker; built when CMake finds an MPI library). A name this
  // build lacks is an InvalidArgument that lists the backends it has. The same-host
  // shared-memory path (kAuto) is composed around whichever backend is chosen.
  std::string backend = "gloo";
  enum class Implementation { kAuto, kRing, kNccl };
  // kAuto: when every worker's address names the same host, all_reduce, broadcast and barrier
  // go through shared memory (each worker copies in, reduces its share, copies out; no socket
  // and no round trip), everything else through the backend; across hosts (told apart by
  // address), the backend alone. kRing: the backend always (Gloo: TCP). kNccl needs GPUs,
  // which this CPU-only build lacks.
  Implementation implementation = Implementation::kAuto;
  // A collective not completed within this time fails (a stalled or lost worker).
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // Workers must all have joined within this time.
  std::chrono::milliseconds rendezvous_timeout = std::chrono::minutes(2);
  // Gradients travel in packs of about this many bytes (one collective each).
  int64_t bytes_per_pack = int64_t{25} << 20;
  // Start each pack's all-reduce during backward, as soon as its gradients are final (the
  // result is bit-identical). Turn off to accumulate gradients over several backward passes
  // before apply_gradients. Workers that share memory (kAuto on one host) reduce after backward
  // whatever this says: there the collective runs on the calling thread, so starting it during
  // backward only holds backward up until the slowest worker arrives.
  bool overlap_with_backward = true;
  // Before each collective, the workers agree on what it is (kind, element count, dtype) in one
  // small all-reduce, so workers that run different steps get a CollectiveError naming what
  // each issued instead of Gloo aborting the process. One round trip per collective over TCP;
  // turn off only to measure it. (In shared memory the check is always made: it costs nothing.)
  bool check_collectives = true;
  // How each gradient pack crosses the workers (communication_hook.h; built-in compression in
  // gradient_compression.h); null: one all-reduce SUM in float32, bit-identical to one device.
  // Needs overlap_with_backward; between workers that share memory it also reduces packs
  // during backward.
  std::shared_ptr<CommunicationHook> communication_hook;
  // Packs of fewer bytes than this skip the hook and cross as one all-reduce SUM in float32
  // (bit-identical to no hook): too small to gain from the hook what its extra collectives and
  // arithmetic cost. -1: the hook's own threshold (CommunicationHook::min_pack_bytes; PowerSGD
  // 1 MiB, bf16 and fp16 none); 0: every pack through the hook. The same on every worker.
  int64_t min_compressed_pack_bytes = -1;
  // Workers that share memory (kAuto on one host) keep one copy of the model's parameters and
  // optimizer slots in it and split each optimizer step between them, each updating its share
  // of the elements in place (bit-identical to each worker stepping its own copy; LibTorch's
  // SGD, Adam, AdamW, RMSprop and Adagrad, models of at least 64Ki parameters per replica).
  // Change the variables outside apply_gradients only through Checkpoint::read or
  // Model::set_weights (they give each worker its own copy first); any other in-place change
  // would land on the one copy once per worker, and the next step refuses it with a
  // CollectiveError. Not under LossScaleOptimizer (each worker then steps its own copy).
  // false: every worker keeps its own copy and takes the whole step.
  bool share_variables_on_host = true;
  // The secret every worker presents to the rendezvous store (SECURITY.md); empty: read
  // DIST_JOB_TOKEN or DIST_JOB_TOKEN_FILE (job_token_from_environment), and run without one
  // when neither is set. dist-launch sets DIST_JOB_TOKEN for its workers.
  std::string job_token;
  // Where the workers meet: "" for DIST_RENDEZVOUS, and when that is unset too the built-in
  // store (hosted by the chief's process tree at the chief's address); or an etcd cluster,
  // "etcd://host:port,host:port,host:port/prefix" (dist/collective/rendezvous_address.h), which
  // holds the job's state outside every worker: an elastic job then survives the loss of any
  // worker, the first one included (docs/elastic.md, "Which rendezvous").
  std::string rendezvous;
  // The job's identity, which a rendezvous store checks (a member of another job is sent away
  // to wait for its own); empty: job_id_from_environment() (cluster_resolver.h).
  std::string job_id;
};

// One generation of an elastic job (docs/elastic.md): the workers of the cluster that train
// together until one is lost or one joins, and the generation's number, which keeps its
// rendezvous apart from the others' in the job's one store.
struct WorkerGeneration {
  int number = 0;
  // Task names of the cluster's workers ("worker:0", "worker:2"); this task must be one. The
  // first of them in the cluster's order is the generation's chief (collective rank 0).
  std::vector<std::string> members;
};

struct MultiWorkerOptions {
  // The cluster and this task; empty: resolve_cluster() (TF_CONFIG, MPI or Slurm).
  std::optional<ClusterConfig> cluster;
  int replicas_per_worker = 1;
  // Intra-op threads per replica; 0: this worker's share of its host's cores, split among its
  // replicas. The share is the CPUs a launcher bound the process to (srun, mpirun --bind-to),
  // else the host's cores divided among the workers whose address names the same host. The
  // thread that makes the strategy gets replicas x this unless you chose its count, as in
  // MirroredOptions::threads_per_replica.
  int threads_per_replica = 0;
  CommunicationOptions communication;
  // The workers split the optimizer's slots (kOptimizer), and the gradients between steps
  // (kGradients), and the parameters (kParameters), each keeping 1/N (sharding.h). Gradients
  // then travel reduce-scattered and parameters all-gathered. Needs overlap_with_backward, and
  // replaces share_variables_on_host.
  Sharding sharding = Sharding::kNone;
  // Sharding::kParameters: which layers stay whole from their forward to their backward, as
  // MirroredOptions::sharding_reuse_bytes (unset: kDefaultShardingReuseBytes; 0: only the
  // last; -1: every layer).
  std::optional<int64_t> sharding_reuse_bytes;
  // Set: an elastic job's generation (a part of the cluster, a rendezvous of its own); unset:
  // every worker of the cluster, for the whole job.
  std::optional<WorkerGeneration> generation;
};

class MultiWorkerMirroredStrategy : public Strategy {
 public:
  // Cluster from resolve_cluster(), one replica per worker.
  MultiWorkerMirroredStrategy();
  explicit MultiWorkerMirroredStrategy(MultiWorkerOptions options);

  // This worker's task in TF_CONFIG. (Strategy::is_chief, num_workers and worker_index
  // tell its place in the job.)
  const TaskSpec& task() const { return task_; }

 private:
  MultiWorkerMirroredStrategy(const MultiWorkerOptions& options, const ClusterConfig& config);
  TaskSpec task_;
};

}  // namespace dist
