// MirroredStrategy: synchronous data parallelism over the replicas of one process.
//
// Each replica runs the step function on its share of every global batch, in its own thread;
// apply_gradients all-reduces the gradients and takes one optimizer step, so all copies of
// the model stay identical (tf.distribute.MirroredStrategy).
//
// On a machine without GPUs the replicas are logical CPU devices ("cpu:0", "cpu:1", ...):
// threads with a share of the cores each. Their model copies share the parameters' storage
// (one update serves all) while each keeps its own gradients and buffers.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/collective/cross_device_ops.h"
#include "dist/distribute/communication_hook.h"
#include "dist/distribute/sharding.h"
#include "dist/distribute/strategy.h"

namespace dist {

struct MirroredOptions {
  // Replica devices. Empty: one logical CPU device per core.
  std::vector<std::string> devices;
  // How gradients (and ReplicaContext::all_reduce) are combined across replicas.
  CrossDeviceOps cross_device_ops = CrossDeviceOps::kParallelAllReduce;
  // Gradients are reduced in packs (buckets) of about this many bytes, one collective each.
  int64_t bytes_per_pack = int64_t{4} << 20;
  // A collective that some replica does not reach within this time fails every replica with
  // a CollectiveError naming the missing replicas.
  std::chrono::milliseconds collective_timeout = std::chrono::minutes(5);
  // Intra-op threads per replica. 0: the cores this process may run on (its CPU affinity, as a
  // launcher such as srun --cpu-bind or taskset left it) / replicas, at least 1, as dist-train
  // sets them. Each replica thread sets its own count; the thread that makes the strategy
  // (where evaluation and your own tensor code outside run() go) gets replicas x this, unless
  // you chose its count: OMP_NUM_THREADS or MKL_NUM_THREADS set, or at::set_num_threads called
  // with a count other than LibTorch's default before the strategy is made
  // (one_device_strategy.h says the same for one replica).
  int threads_per_replica = 0;
  // The replicas of a process split each optimizer step between them, each updating a share
  // of every variable's elements (bit-identical to one step; LibTorch's SGD, Adam, AdamW,
  // RMSprop and Adagrad). false: replica 0 takes the step alone while the others wait.
  bool shard_optimizer_step = true;
  // How each gradient pack crosses the processes (communication_hook.h); null: one
  // all-reduce. In one process it still runs, over collectives of one member: a compressing
  // hook gives the numerics it gives across workers.
  std::shared_ptr<CommunicationHook> communication_hook;
  // Packs of fewer bytes than this skip the hook and cross as one all-reduce SUM in float32
  // (bit-identical to no hook): too small to gain from the hook what its extra collectives and
  // arithmetic cost. -1: the hook's own threshold (CommunicationHook::min_pack_bytes; PowerSGD
  // 1 MiB, bf16 and fp16 none); 0: every pack through the hook. The same on every worker.
  int64_t min_compressed_pack_bytes = -1;
  // How much of the optimizer's state, the gradients and the parameters the workers split
  // between them (sharding.h); in one process a level moves the optimizer's slots into the
  // strategy without saving memory. Not with a communication hook.
  Sharding sharding = Sharding::kNone;
  // Sharding::kParameters: a layer stays whole from its forward to its backward when the
  // layers computing in between (those after it) hold at most this many bytes of parameters,
  // saving its second gather for the memory of holding it meanwhile (DeepSpeed's
  // stage3_max_reuse_distance, which counts elements). Unset: kDefaultShardingReuseBytes
  // (sharding.h). 0: only the last layer stays (backward starts with it), as FSDP's
  // reshard_after_forward, the least memory for 1.5x an all-reduce's bytes; -1: every layer
  // stays, one gather per step, the whole model held at the turn to backward. Set only with
  // Sharding::kParameters.
  std::optional<int64_t> sharding_reuse_bytes;
};

class MirroredStrategy : public Strategy {
 public:
  // One replica per core.
  MirroredStrategy();
  // Replicas on these devices, e.g. {"cpu:0", "cpu:1"}.
  explicit MirroredStrategy(std::vector<std::string> devices);
  explicit MirroredStrategy(MirroredOptions options);

 protected:
  MirroredStrategy(std::string name, MirroredOptions options);
};

// CentralStorageStrategy: variables are kept once, on the host; computation is replicated
// over the local devices, and gradients are reduced to the host before one update
// (tf.distribute.experimental.CentralStorageStrategy). On CPU the host is every replica's
// device, so this differs from MirroredStrategy only in its default reduction
// (kReductionToOneDevice).
class CentralStorageStrategy : public MirroredStrategy {
 public:
  CentralStorageStrategy();
  explicit CentralStorageStrategy(std::vector<std::string> devices);
  explicit CentralStorageStrategy(MirroredOptions options);
};

// Cores of this machine (at least 1).
int available_cores();

}  // namespace dist
