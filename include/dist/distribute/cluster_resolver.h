// Cluster resolvers: the cluster of a multi-worker job and this process's task, read from what
// the launcher that started it put in the environment (tf.distribute.cluster_resolver).
//
// resolve_cluster() picks one in this order, unless DIST_CLUSTER_RESOLVER names one
// (tf_config, slurm or mpi):
//   1. TF_CONFIG, when set: dist-launch, Kubeflow's TFJob operator, or written by hand.
//   2. MPI, when OMPI_COMM_WORLD_RANK (Open MPI's mpirun) or PMI_RANK (MPICH's Hydra) is set.
//   3. Slurm, when SLURM_PROCID is set (srun).
// MPI comes before Slurm because mpirun inside an sbatch allocation inherits the batch script's
// SLURM_PROCID=0 on every rank; the MPI variables are the ones set per process.
//
// Slurm and MPI tasks become workers worker:0..N-1 (N = the launcher's task count, index = its
// rank), placed on the nodes in blocks: the first tasks-per-node ranks on the first node, and
// so on (srun's and mpirun's default). Each worker's address is its node's name with port
// DIST_PORT_BASE (default 8888) plus its local index on the node. Worker 0's address hosts the
// rendezvous store; DIST_COORDINATOR_ADDRESS=host:port replaces it (another interface or port).
//
// Every malformed or inconsistent value is an InvalidArgument naming the variable and the value,
// thrown before any socket opens.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dist/distribute/cluster_spec.h"

namespace dist {

using EnvironmentVariables = std::map<std::string, std::string>;

// This process's environment.
EnvironmentVariables process_environment();

// Slurm's srun: SLURM_PROCID, SLURM_NTASKS (SLURM_STEP_NUM_TASKS first), SLURM_LOCALID, the node
// list (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST or SLURM_NODELIST) and the tasks per node
// (SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE, e.g. "2(x3),1"). Checks that Slurm placed
// this task where block placement says (SLURMD_NODENAME, SLURM_LOCALID).
class SlurmClusterResolver {
 public:
  explicit SlurmClusterResolver(const EnvironmentVariables& env = process_environment());
  const ClusterConfig& config() const { return config_; }
  const ClusterSpec& cluster_spec() const { return config_.cluster; }
  const TaskSpec& task() const { return config_.task; }

 private:
  ClusterConfig config_;
};

// MPI launchers: Open MPI (OMPI_COMM_WORLD_RANK / SIZE / LOCAL_RANK / LOCAL_SIZE) or MPICH's
// Hydra (PMI_RANK / PMI_SIZE, MPI_LOCALRANKID / MPI_LOCALNRANKS). MPI does not tell a process the
// other nodes, so a job over several nodes takes them from DIST_NODE_LIST (Slurm's syntax,
// "node[01-04]"), or SLURM_JOB_NODELIST when mpirun runs inside a Slurm allocation. When every
// rank is on this node (local size = size), the workers use 127.0.0.1.
class MpiClusterResolver {
 public:
  explicit MpiClusterResolver(const EnvironmentVariables& env = process_environment());
  const ClusterConfig& config() const { return config_; }
  const ClusterSpec& cluster_spec() const { return config_.cluster; }
  const TaskSpec& task() const { return config_.task; }

 private:
  ClusterConfig config_;
};

struct ResolvedCluster {
  ClusterConfig config;
  // Where it came from, for messages: "TF_CONFIG", "Slurm", "Open MPI" or "MPICH (PMI)".
  std::string source;
};

// The order of the top comment. InvalidArgument when no launcher's variables are present,
// saying how to start a multi-worker job.
ResolvedCluster resolve_cluster(const EnvironmentVariables& env = process_environment());

// The job token (SECURITY.md): DIST_JOB_TOKEN, or the first line of the file DIST_JOB_TOKEN_FILE
// (a Kubernetes secret, say); empty when neither is set. InvalidArgument when both are set, the
// file cannot be read, or the token is not 16 to 1024 printable characters without spaces.
std::string job_token_from_environment(const EnvironmentVariables& env = process_environment());

// The job's identity: what every worker of one job (and every restart of it) shares and a later
// job on the same addresses does not, so that a member never takes another job's rendezvous
// store, nor its state, for its own (docs/clusters.md, "Reruns on the same addresses").
// DIST_JOB_ID (dist-launch sets a new one per launch), else Slurm's SLURM_JOB_ID.SLURM_STEP_ID,
// else Open MPI's PMIX_NAMESPACE (one per mpirun); empty for workers started by hand, whose
// jobs are told apart by the store's life instead (a job's store closes as its job ends).
// InvalidArgument when DIST_JOB_ID is longer than 256 characters or not printable.
std::string job_id_from_environment(const EnvironmentVariables& env = process_environment());

// Checks a token as job_token_from_environment does; `source` names it in the message.
void check_job_token(const std::string& token, const std::string& source);

// Slurm's host list syntax: "node[01-04,07],gpu3" -> node01 node02 node03 node04 node07 gpu3.
// Zero padding follows the range's first number; several bracket groups multiply
// ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2). InvalidArgument names `variable` and the problem.
std::vector<std::string> expand_slurm_node_list(const std::string& list,
                                                const std::string& variable = "node list");

// Slurm's tasks-per-node syntax: "2(x3),1" -> 2 2 2 1.
std::vector<int> expand_slurm_tasks_per_node(const std::string& spec,
                                             const std::string& variable = "tasks per node");

}  // namespace dist
