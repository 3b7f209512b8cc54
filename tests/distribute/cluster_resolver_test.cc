// Cluster resolvers: TF_CONFIG (TFJob's form too), Slurm, Open MPI and MPICH environments as
// their launchers write them, and every malformed value as a named error.
#include "dist/distribute/cluster_resolver.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>

#include "dist/core/error.h"
#include "test_util.h"

namespace dist {
namespace {

using Hosts = std::vector<std::string>;

// Expects `call` to throw InvalidArgument whose message contains every one of `parts`.
template <typename F>
void expect_error(F call, const std::vector<std::string>& parts) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one mentioning " << parts.front();
  } catch (const InvalidArgument& e) {
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << part << "' missing in: " << e.what();
  }
}

// `env` with `name` set to `value`, or removed when `value` is empty.
EnvironmentVariables changed(EnvironmentVariables env, const std::string& name,
                             const std::string& value) {
  if (value.empty())
    env.erase(name);
  else
    env[name] = value;
  return env;
}

std::vector<std::string> addresses(const ClusterConfig& config) {
  return config.cluster.jobs().at("worker");
}

TEST(SlurmNodeListTest, ExpandsRangesPaddingListsAndSeveralGroups) {
  EXPECT_EQ(expand_slurm_node_list("vm"), Hosts({"vm"}));
  EXPECT_EQ(expand_slurm_node_list("node[01-04,07]"),
            Hosts({"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expand_slurm_node_list("gpu[8-11],cpu3"),
            Hosts({"gpu8", "gpu9", "gpu10", "gpu11", "cpu3"}));
  EXPECT_EQ(expand_slurm_node_list("n[098-101]"), Hosts({"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_slurm_node_list("r[1-2]n[1-2].ib"),
            Hosts({"r1n1.ib", "r1n2.ib", "r2n1.ib", "r2n2.ib"}));
  EXPECT_EQ(expand_slurm_node_list("a,b[3],c[1,3]"), Hosts({"a", "b3", "c1", "c3"}));
}

TEST(SlurmNodeListTest, MalformedListsAreNamedErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {"node[01-04", "'[' without ']'"},
      {"node01-04]", "']' without '['"},
      {"node[]", "empty range"},
      {"node[4-1]", "runs backwards"},
      {"node[a-b]", "not a number"},
      {"node[1-]", "not a number"},
      {"a,,b", "empty host name"},
      {"n[[1]]", "nested"},
      {"n[1-99999999]", "more hosts"},
  };
  for (const auto& [list, problem] : cases)
    expect_error([&] { expand_slurm_node_list(list, "SLURM_STEP_NODELIST"); },
                 {"SLURM_STEP_NODELIST='" + list + "'", problem});
}

TEST(SlurmTasksPerNodeTest, ExpandsRepeatsAndRejectsMalformedCounts) {
  EXPECT_EQ(expand_slurm_tasks_per_node("2(x3),1"), std::vector<int>({2, 2, 2, 1}));
  EXPECT_EQ(expand_slurm_tasks_per_node("4"), std::vector<int>({4}));
  for (const std::string spec : {"", "2(x)", "2(3)", "x", "0", "2(x3", "2,,1", "-1"})
    expect_error([&] { expand_slurm_tasks_per_node(spec, "SLURM_TASKS_PER_NODE"); },
                 {"SLURM_TASKS_PER_NODE='" + spec + "'"});
}

// What srun sets for task `rank` of 4 tasks over node[1-2], 2 per node.
EnvironmentVariables slurm_task(int rank) {
  return {{"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_NTASKS", "4"},
          {"SLURM_LOCALID", std::to_string(rank % 2)},
          {"SLURM_STEP_NODELIST", "node[1-2]"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
          {"SLURMD_NODENAME", rank < 2 ? "node1" : "node2"},
          {"DIST_PORT_BASE", "9000"}};
}

TEST(SlurmClusterResolverTest, PlacesTasksInBlocksWithAPortPerLocalTask) {
  for (int rank = 0; rank < 4; ++rank) {
    const auto resolved = resolve_cluster(slurm_task(rank));
    EXPECT_EQ(resolved.source, "Slurm");
    EXPECT_EQ(resolved.config.task.name(), "worker:" + std::to_string(rank));
    EXPECT_EQ(addresses(resolved.config),
              Hosts({"node1:9000", "node1:9001", "node2:9000", "node2:9001"}));
    EXPECT_EQ(resolved.config.cluster.store_address().to_string(), "node1:9000");
  }
  // Uneven nodes, the default port base, and SLURM_JOB_NODELIST when the step's is absent.
  EnvironmentVariables env = {{"SLURM_PROCID", "2"},           {"SLURM_NTASKS", "3"},
                              {"SLURM_LOCALID", "0"},          {"SLURM_JOB_NODELIST", "a,b"},
                              {"SLURM_TASKS_PER_NODE", "2,1"}, {"SLURMD_NODENAME", "b"}};
  const auto config = SlurmClusterResolver(env).config();
  EXPECT_EQ(addresses(config), Hosts({"a:8888", "a:8889", "b:8888"}));
  EXPECT_EQ(config.task.index, 2);
  // The coordinator's address from the documented variable.
  env["DIST_COORDINATOR_ADDRESS"] = "10.0.0.1:7000";
  EXPECT_EQ(SlurmClusterResolver(env).config().cluster.store_address().to_string(),
            "10.0.0.1:7000");
}

TEST(SlurmClusterResolverTest, MalformedOrInconsistentValuesAreNamedErrors) {
  auto with = [](int rank, const std::string& name, const std::string& value) {
    return changed(slurm_task(rank), name, value);
  };
  const std::vector<std::tuple<EnvironmentVariables, std::vector<std::string>>> cases = {
      {with(0, "SLURM_PROCID", "x"), {"SLURM_PROCID='x'", "not a non-negative integer"}},
      {with(0, "SLURM_PROCID", "4"), {"SLURM_PROCID='4'", "task count 4"}},
      {with(0, "SLURM_NTASKS", "0"), {"SLURM_NTASKS='0'", "outside 1.."}},
      {with(0, "SLURM_NTASKS", ""), {"SLURM_NTASKS is not set"}},
      {with(0, "SLURM_LOCALID", "-1"), {"SLURM_LOCALID='-1'"}},
      {with(0, "SLURM_STEP_NODELIST", ""), {"SLURM_STEP_NODELIST", "srun"}},
      {with(0, "SLURM_STEP_NODELIST", "node[1-2"), {"SLURM_STEP_NODELIST='node[1-2'"}},
      {with(0, "SLURM_STEP_TASKS_PER_NODE", "2(x3)"), {"describes 3 nodes", "lists 2"}},
      {with(0, "SLURM_STEP_TASKS_PER_NODE", "3,2"), {"adds up to 5 tasks", "has 4"}},
      {with(1, "SLURM_LOCALID", "0"), {"task 1", "--distribution=block"}},
      {with(2, "SLURMD_NODENAME", "node1"), {"on node node1", "puts it on node2"}},
      {with(0, "DIST_PORT_BASE", "65535"), {"DIST_PORT_BASE='65535'", "outside 1..65534"}},
      {with(0, "DIST_PORT_BASE", "http"), {"DIST_PORT_BASE='http'"}},
      {with(0, "DIST_COORDINATOR_ADDRESS", "nohost"), {"DIST_COORDINATOR_ADDRESS='nohost'"}},
      {with(0, "DIST_CLUSTER_RESOLVER", "kubernetes"), {"DIST_CLUSTER_RESOLVER='kubernetes'"}},
  };
  for (const auto& [env, parts] : cases) expect_error([&] { resolve_cluster(env); }, parts);
  auto uneven = slurm_task(0);
  uneven.erase("SLURM_STEP_TASKS_PER_NODE");
  uneven["SLURM_NTASKS"] = "3";
  expect_error([&] { resolve_cluster(uneven); }, {"3 tasks do not divide evenly over the 2 nodes"});
}

// A node or host name no host can have (a ';', hundreds of characters) is refused before any
// socket is opened, named by where it came from: Slurm's node list is not TF_CONFIG.
TEST(SlurmClusterResolverTest, HostNamesAreCheckedBeforeAnySocketNamingWhereTheyCameFrom) {
  for (const auto& [name, problem] : std::vector<std::pair<std::string, std::string>>{
           {"no;de1", "holds a character that no host name or IP address has"},
           {std::string(300, 'n'), "has 300 characters; a host name has 1 to 253"}}) {
    auto env = slurm_task(0);
    env["SLURM_STEP_NODELIST"] = name + ",node2";
    env["SLURMD_NODENAME"] = name;
    try {
      resolve_cluster(env);
      ADD_FAILURE() << "accepted the node name " << name;
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("node 0 of this job's node list (Slurm's"), std::string::npos)
          << message;
      EXPECT_NE(message.find(problem), std::string::npos) << message;
      EXPECT_EQ(message.find("TF_CONFIG"), std::string::npos) << message;
    }
  }
  using Jobs = std::map<std::string, std::vector<std::string>>;
  expect_error(
      [] {
        ClusterSpec(Jobs{{"worker", {"a;b:1000"}}});
      },
      {"TF_CONFIG: cluster.worker[0]", "the host name 'a;b' holds a character"});
  // A task placed against block order, on a node that does not say its name.
  auto unnamed = changed(slurm_task(1), "SLURM_LOCALID", "0");
  unnamed.erase("SLURMD_NODENAME");
  expect_error([&] { resolve_cluster(unnamed); }, {"(unnamed: SLURMD_NODENAME is not set)"});
}

TEST(MpiClusterResolverTest, OpenMpiOnOneNodeUsesLoopbackAndOnSeveralTheNodeList) {
  EnvironmentVariables env = {{"OMPI_COMM_WORLD_RANK", "1"},
                              {"OMPI_COMM_WORLD_SIZE", "2"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                              {"DIST_PORT_BASE", "7100"}};
  auto resolved = resolve_cluster(env);
  EXPECT_EQ(resolved.source, "Open MPI");
  EXPECT_EQ(resolved.config.task.name(), "worker:1");
  EXPECT_EQ(addresses(resolved.config), Hosts({"127.0.0.1:7100", "127.0.0.1:7101"}));

  env = {{"OMPI_COMM_WORLD_RANK", "3"},       {"OMPI_COMM_WORLD_SIZE", "4"},
         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
         {"DIST_NODE_LIST", "h[1-2]"},        {"SLURM_PROCID", "0"}};  // inside an allocation
  resolved = resolve_cluster(env);
  EXPECT_EQ(resolved.source, "Open MPI");  // not Slurm: mpirun's variables win
  EXPECT_EQ(resolved.config.task.index, 3);
  EXPECT_EQ(addresses(resolved.config), Hosts({"h1:8888", "h1:8889", "h2:8888", "h2:8889"}));
}

TEST(MpiClusterResolverTest, MpichHydraVariables) {
  EnvironmentVariables env = {
      {"PMI_RANK", "0"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "3"}};
  auto resolved = resolve_cluster(env);
  EXPECT_EQ(resolved.source, "MPICH (PMI)");
  EXPECT_EQ(resolved.config.cluster.num_tasks("worker"), 3);
}

TEST(MpiClusterResolverTest, MalformedOrInconsistentValuesAreNamedErrors) {
  const EnvironmentVariables good = {{"OMPI_COMM_WORLD_RANK", "2"},
                                     {"OMPI_COMM_WORLD_SIZE", "4"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                     {"DIST_NODE_LIST", "h[1-2]"}};
  auto with = [&](const std::string& name, const std::string& value) {
    return changed(good, name, value);
  };
  const std::vector<std::tuple<EnvironmentVariables, std::vector<std::string>>> cases = {
      {with("OMPI_COMM_WORLD_SIZE", "two"), {"OMPI_COMM_WORLD_SIZE='two'"}},
      {with("OMPI_COMM_WORLD_RANK", "4"), {"OMPI_COMM_WORLD_RANK='4'", "not below"}},
      {with("OMPI_COMM_WORLD_LOCAL_SIZE", ""), {"OMPI_COMM_WORLD_LOCAL_SIZE is not set"}},
      {with("OMPI_COMM_WORLD_LOCAL_RANK", "2"), {"OMPI_COMM_WORLD_LOCAL_RANK='2'", "not below"}},
      {with("DIST_NODE_LIST", ""), {"spans several nodes", "DIST_NODE_LIST"}},
      {with("DIST_NODE_LIST", "h[1-3]"), {"3 nodes x", "is not OMPI_COMM_WORLD_SIZE=4"}},
      {with("OMPI_COMM_WORLD_LOCAL_RANK", "1"), {"placed rank 2 as local rank 1", "--map-by slot"}},
      {with("DIST_NODE_LIST", "h[2-1]"), {"DIST_NODE_LIST='h[2-1]'", "backwards"}},
  };
  for (const auto& [env, parts] : cases) expect_error([&] { resolve_cluster(env); }, parts);
  expect_error(
      [] {
        resolve_cluster({{"DIST_CLUSTER_RESOLVER", "mpi"}});
      },
      {"DIST_CLUSTER_RESOLVER=mpi", "mpirun"});
}

TEST(ResolveClusterTest, TfConfigFirstIncludingTfJobsFormAndAnErrorWhenNothingIsSet) {
  // What Kubeflow's TFJob operator writes for a worker of a 2-worker job.
  const std::string tfjob =
      R"({"cluster":{"worker":["mnist-worker-0.kubeflow.svc:2222",)"
      R"("mnist-worker-1.kubeflow.svc:2222"]},"task":{"type":"worker","index":1},)"
      R"("environment":"cloud"})";
  auto resolved = resolve_cluster({{"TF_CONFIG", tfjob}, {"SLURM_PROCID", "0"}});
  EXPECT_EQ(resolved.source, "TF_CONFIG");
  EXPECT_EQ(resolved.config.task.name(), "worker:1");
  EXPECT_EQ(resolved.config.cluster.store_address().to_string(),
            "mnist-worker-0.kubeflow.svc:2222");
  expect_error(
      [] {
        resolve_cluster(
            {{"TF_CONFIG", R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":0},)"
                           R"("environment":7})"}});
      },
      {"TF_CONFIG: environment", "expected a string"});
  // Named resolver overrides the order.
  auto slurm = slurm_task(1);
  slurm["TF_CONFIG"] = tfjob;
  slurm["DIST_CLUSTER_RESOLVER"] = "slurm";
  EXPECT_EQ(resolve_cluster(slurm).source, "Slurm");
  expect_error([] { resolve_cluster({}); }, {"no cluster found", "srun", "mpirun", "TF_CONFIG"});
}

TEST(JobTokenTest, FromTheVariableOrAFileWithNamedErrors) {
  const std::string token = "0123456789abcdef0123";
  EXPECT_EQ(job_token_from_environment({}), "");
  EXPECT_EQ(job_token_from_environment({{"DIST_JOB_TOKEN", token}}), token);
  testing::TempDir dir;
  std::ofstream(dir.file("token")) << token << "\n";
  EXPECT_EQ(job_token_from_environment({{"DIST_JOB_TOKEN_FILE", dir.file("token")}}), token);
  expect_error(
      [] {
        job_token_from_environment({{"DIST_JOB_TOKEN", "short"}});
      },
      {"DIST_JOB_TOKEN is 5 characters", "16 to 1024"});
  expect_error(
      [] {
        job_token_from_environment({{"DIST_JOB_TOKEN", "has a space in it here"}});
      },
      {"DIST_JOB_TOKEN holds a space"});
  expect_error(
      [&] {
        job_token_from_environment({{"DIST_JOB_TOKEN", token}, {"DIST_JOB_TOKEN_FILE", "x"}});
      },
      {"both DIST_JOB_TOKEN and DIST_JOB_TOKEN_FILE"});
  expect_error(
      [&] {
        job_token_from_environment({{"DIST_JOB_TOKEN_FILE", dir.file("none")}});
      },
      {"DIST_JOB_TOKEN_FILE='" + dir.file("none") + "'", "cannot open it"});
}

// A token file that is not a regular file, or holds no token, is refused at once: a FIFO with no
// writer must not block, a device like /dev/zero must not be read without end.
TEST(JobTokenTest, ANonRegularEmptyOrEndlessTokenFileIsRefusedWithoutBlocking) {
  testing::TempDir dir;
  const auto refused = [](const std::string& path, const std::vector<std::string>& words) {
    expect_error([&] { job_token_from_environment({{"DIST_JOB_TOKEN_FILE", path}}); }, words);
  };
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0) << std::strerror(errno);
  refused(dir.file("fifo"), {"not a regular file", "write the token into a regular file"});
  refused(dir.path(), {"not a regular file"});
  std::ofstream(dir.file("empty")).flush();
  refused(dir.file("empty"), {"is empty"});
  std::ofstream(dir.file("endless")) << std::string(5000, 'a');
  refused(dir.file("endless"), {"longer than 1024 characters"});
  std::ofstream(dir.file("crlf")) << "0123456789abcdef0123\r\nmore\n";
  EXPECT_EQ(job_token_from_environment({{"DIST_JOB_TOKEN_FILE", dir.file("crlf")}}),
            "0123456789abcdef0123");
  // A device of our own, the same as /dev/zero (character device 1:5), where it may be made.
  if (::mknod(dir.file("zero").c_str(), S_IFCHR | 0600, ::makedev(1, 5)) == 0) {
    refused(dir.file("zero"), {"not a regular file"});
  } else {
    std::cout << "[   NOTE   ] mknod not permitted here (" << std::strerror(errno)
              << "); the device case was not run\n";
  }
}

}  // namespace
}  // namespace dist
