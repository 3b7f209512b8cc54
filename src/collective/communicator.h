// Communicator: the one collective interface of the library.
//
// A communicator is one member (rank) of a group of `size()` members. Every member calls the
// same collectives in the same order with tensors of the same count, shapes and dtypes (CPU,
// contiguous); a member that calls something else, or does not come, makes the others fail
// with a CollectiveError naming it, within the communicator's timeout or the deadline given to
// Work::wait. After a CollectiveError the communicator is unusable: recreate it.
//
// Order across threads: "the same order" is the order of issue on each member. Where one
// process's replicas share a cross-process member (HierarchicalCommunicator), the thread that
// completes a collective's in-process stage issues its cross-process stage before it goes on,
// so collectives issued from forward, from backward (the gradient of ReplicaContext::all_reduce)
// and by a gradient reducer as packs fill are issued in the replicas' common program order on
// every process. A reducer's packs still open when a collective from *after* backward is
// issued are completed first (src/distribute/reduction/backward_collective.h says when not to).
//
// Calls start the collective and return a Work handle; the tensors must stay alive and
// untouched until wait() returns. Implementations may finish the work inside the call (the
// in-process group: its members' threads do the arithmetic), then wait() returns at once.
//
// Implementations (see factory.h): local/ (threads of one process, in shared memory);
// ProcessCommunicator (processes, one member each) around a Transport, one folder per backend:
// gloo/ (TCP through LibTorch's c10d); shm/ around that for processes of one host.
// HierarchicalCommunicator composes a local member with a cross-process one.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/core/reduce_op.h"

namespace dist::collective {

// wait() without a deadline of its own: the communicator's timeout bounds it.
constexpr std::chrono::milliseconds kNoDeadline{-1};

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective completed (its outputs are then valid) or `deadline` passed.
  // Rethrows the collective's failure; a passed deadline is a CollectiveError that names the
  // members that did not take part. Calling it again after success returns at once.
  virtual void wait(std::chrono::milliseconds deadline = kNoDeadline) = 0;
  virtual bool is_completed() = 0;
};
using WorkHandle = std::shared_ptr<Work>;

// A Work that was finished by the call that returned it.
WorkHandle completed_work();

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Member `rank` for messages, e.g. "worker:1 (127.0.0.1:2223)" or "replica 2".
  virtual std::string member_name(int rank) const = 0;

  // In place on every member. MEAN divides by size() (integers truncate).
  virtual WorkHandle all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) = 0;
  // As all_reduce, but the result is only guaranteed in the tensors of each process's first
  // member; other members' tensors keep their inputs. For replicas of one process that share
  // their parameters, whose gradients are needed once per process (no copies back).
  virtual WorkHandle all_reduce_to_process_leader(std::vector<at::Tensor>& tensors, ReduceOp op) {
    return all_reduce(tensors, op);
  }
  // In place: every member ends with root's values.
  virtual WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root) = 0;
  // Every member's `input` concatenated along dim 0 in rank order, into *output (valid after
  // wait). Sizes along dim 0 may differ between members; the other dims and dtype may not.
  virtual WorkHandle all_gather(const at::Tensor& input, at::Tensor* output) = 0;
  // As all_gather, into `output`, a contiguous tensor of every member's rows (the caller knows
  // how many); `input` may be a view of this member's own rows of `output` (the sharded step
  // gathers its chunks straight into the parameters this way). By default all_gather, then a
  // copy when the work is waited for; the shared-memory communicator copies straight out of its
  // slots.
  virtual WorkHandle all_gather_into(const at::Tensor& input, at::Tensor& output);
  // The element-wise reduction of every member's `input` (same shape everywhere), cut along
  // dim 0 into size() chunks (chunk_range); this member's chunk goes into `output`, which must
  // have that chunk's shape.
  virtual WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) = 0;
  virtual WorkHandle barrier() = 0;

  // Point to point. `tag` tells apart messages between the same two members; a send and its
  // recv must agree on tag, shape and dtype.
  virtual WorkHandle send(const at::Tensor& tensor, int to, int tag = 0) = 0;
  virtual WorkHandle recv(at::Tensor& tensor, int from, int tag = 0) = 0;

  // Publishes this member's `value` under `key` and returns every member's value in rank
  // order. Blocking; for start-up checks (small strings, out of band of the collectives).
  virtual std::vector<std::string> exchange(const std::string& key, const std::string& value) = 0;

  // This member is failing for `reason` (its data or checkpoint could not be read, ...): tell
  // the others, so that whatever they wait for fails at once naming this member and the reason,
  // instead of at a timeout. The communicator is unusable afterwards. Members of one process
  // fail together anyway: only cross-process communicators have something to do.
  virtual void abort(const std::string& reason) {}

  // `bytes` of memory that every member maps, for state the members keep as one copy instead
  // of one each (processes of one host). A collective: every member asks for the same size.
  // Null on every member when they cannot share memory (other hosts, no room in /dev/shm);
  // then each keeps its own copy. The memory stays mapped while the pointer or a copy lives.
  virtual std::shared_ptr<void> share_memory(int64_t bytes) { return nullptr; }

  // Whether every collective completes inside the call (its Work is done when returned). Then
  // issuing gradient packs during backward overlaps nothing: each pack would only wait for the
  // slowest member while backward is held up.
  virtual bool completes_in_call() const { return false; }

  // What carries this member's collectives between processes, for the timeline
  // (dist/core/timeline.h): a string literal, "gloo", "mpi" or "in process". Where
  // completes_in_call(), its all-reduces, broadcasts and barriers go through shared memory.
  virtual const char* backend_name() const { return "in process"; }
};

// The rows [begin, end) of dim 0 that member `rank` of `size` gets in reduce_scatter: as even
// as possible, earlier members one row more.
std::pair<int64_t, int64_t> chunk_range(int64_t rows, int size, int rank);

// InvalidArgument unless `peer` is a member of a group of `size` other than `self`: the check
// every send and recv makes. `what`: "send", "recv"; `self_name` names the caller.
void check_peer(const char* what, const std::string& self_name, int self, int peer, int size);

// out = sources[0] op sources[1] op ..., in this order, so whoever computes it gets the same
// bits (MEAN sums; divide_for_mean finishes it). `out_is_first`: out aliases sources[0].
void reduce_in_order(ReduceOp op, at::Tensor& out, const std::vector<at::Tensor>& sources,
                     bool out_is_first);

// The division that turns a SUM into a MEAN over `members`, in place; integers truncate,
// keeping their dtype.
void divide_for_mean(at::Tensor& tensor, int64_t members);

// reduce_scatter for the in-process communicators (local/, hierarchical): an all_reduce of a
// copy of `input` through `communicator`, of which `output` gets this member's chunk when the
// returned work is waited for. Between threads that costs memory bandwidth, not traffic, and the
// chunk has all_reduce's bits. Between processes, ProcessCommunicator uses a ring of send/recv
// instead (ring_reduce_scatter.h: half the traffic).
WorkHandle reduce_scatter_by_all_reduce(Communicator& communicator, const at::Tensor& input,
                                        at::Tensor& output, ReduceOp op);

}  // namespace dist::collective
