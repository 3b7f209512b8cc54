// Multi-worker dist-train started the ways a cluster starts it: Open MPI's real mpirun, a real
// single-node Slurm's srun (daemons started by the test, slurm_cluster.sh), and dist-launch
// restarting a job after kill -9 of a worker; and a job that strangers knock on. Real processes
// on 127.0.0.1, every one bounded in time.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "collective/store/store_client.h"
#include "dist/core/error.h"
#include "dist/distribute/local_cluster.h"
#include "dist/train/safetensors.h"
#include "equivalence_data.h"
#include "multi_worker/process_group.h"
#include "test_util.h"
#include "tools/train_runs.h"
#include "tools/weight_files.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::expect_same_weights;
using testing::find_program;
using testing::job_args;
using testing::one_device_weights;
using testing::ProcessResult;
using testing::weights_in;
using testing::WorkerProcesses;

const std::string kToken = "c0ffee00c0ffee00c0ffee00c0ffee00";

// The launcher's run of job_args under 2 workers x 1 replica found its cluster through `source`
// and ended with one device's weights (`expected`) within 1e-5.
void expect_two_workers_reached(const ProcessResult& result, const std::string& source,
                                const std::string& weights, const std::string& expected) {
  testing::expect_workers_reached(result, source, 2, 2, weights, expected);
}

TEST(ClusterLaunchTest, MpirunStartsTwoWorkersThatReproduceOneDeviceWeights) {
  const std::string mpirun = find_program("mpirun");
  if (mpirun.empty()) GTEST_SKIP() << "mpirun is not installed (apt-get install openmpi-bin)";
  testing::TempDir dir;
  const std::string expected = one_device_weights();
  const int port = free_loopback_ports(1).at(0);
  std::vector<std::string> args;
  if (geteuid() == 0) args.push_back("--allow-run-as-root");
  args.insert(args.end(), {"--oversubscribe", "-np", "2", "-x", "DIST_PORT_BASE", "-x",
                           "DIST_JOB_TOKEN", DIST_TRAIN_BINARY});
  for (const auto& a : job_args("multi_worker", dir.file("mpi.safetensors"))) args.push_back(a);
  WorkerProcesses launcher;
  launcher.start(mpirun, args,
                 {"DIST_PORT_BASE=" + std::to_string(port), "DIST_JOB_TOKEN=" + kToken});
  expect_two_workers_reached(launcher.wait_all(240s).at(0), "Open MPI", dir.file("mpi.safetensors"),
                             expected);
}

// A real single-node Slurm for one test: its daemons started in `dir` (stopped when this goes
// out of scope, whatever happens); skipped() says why not where it cannot run.
class SlurmCluster {
 public:
  explicit SlurmCluster(const testing::TempDir& dir) : slurm_dir_(dir.file("slurm")) {
    if (find_program("srun").empty() || find_program("slurmctld").empty()) {
      skipped_ = "Slurm is not installed (apt-get install slurm-wlm munge)";
      return;
    }
    std::filesystem::create_directories(slurm_dir_);
    started_ = true;
    const int status = std::system(("timeout -s KILL 60 " + script() + " start " + slurm_dir_ +
                                    " > " + dir.file("slurm_start.log") + " 2>&1")
                                       .c_str());
    log_ = testing::read_file(dir.file("slurm_start.log"));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) skipped_ = log_;
    failed_ = status != 0 && skipped_.empty();
  }
  ~SlurmCluster() {
    if (started_)
      std::system(
          ("timeout -s KILL 30 " + script() + " stop " + slurm_dir_ + " >/dev/null 2>&1").c_str());
  }
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  const std::string& skipped() const { return skipped_; }
  bool failed() const { return failed_; }
  const std::string& log() const { return log_; }
  std::string conf() const { return "SLURM_CONF=" + slurm_dir_ + "/slurm.conf"; }

 private:
  static std::string script() {
    return std::string(DIST_SOURCE_DIR) + "/tests/tools/slurm_cluster.sh";
  }
  std::string slurm_dir_, skipped_, log_;
  bool started_ = false, failed_ = false;
};

#define START_SLURM(slurm, dir)                                  \
  SlurmCluster slurm(dir);                                       \
  if (!slurm.skipped().empty()) GTEST_SKIP() << slurm.skipped(); \
  ASSERT_FALSE(slurm.failed()) << slurm.log()

TEST(ClusterLaunchTest, SrunOnARealSlurmStartsTwoWorkersThatReproduceOneDeviceWeights) {
  testing::TempDir dir;
  START_SLURM(slurm, dir);
  const std::string expected = one_device_weights();
  const int port = free_loopback_ports(1).at(0);
  std::vector<std::string> args{"-n", "2", "--time", "5", DIST_TRAIN_BINARY};
  for (const auto& a : job_args("multi_worker", dir.file("slurm.safetensors"))) args.push_back(a);
  WorkerProcesses launcher;
  launcher.start(
      find_program("srun"), args,
      {slurm.conf(), "DIST_PORT_BASE=" + std::to_string(port), "DIST_JOB_TOKEN=" + kToken});
  expect_two_workers_reached(launcher.wait_all(240s).at(0), "Slurm", dir.file("slurm.safetensors"),
                             expected);
}

// What every task of a launcher's elastic test runs: killed_train, worker:1 SIGKILLing itself
// after step 50 of 150, in an elastic job of at least 2 workers that writes `weights`.
std::vector<std::string> elastic_task(const std::string& weights) {
  std::vector<std::string> task{KILLED_TRAIN_BINARY, "--kill-at-step", "50", "--kill-worker", "1"};
  for (const auto& a : job_args("multi_worker", weights, 150)) task.push_back(a);
  task.insert(task.end(), {"--min-workers", "2"});
  return task;
}

// The launcher's run of elastic_task went on at 2 workers after the loss and ended at one
// device's weights (`expected`).
void expect_went_on_at_two(const ProcessResult& result, const std::string& weights,
                           const std::string& expected, const std::string& launcher) {
  EXPECT_TRUE(testing::contains(result.output, "sizes 3 -> 2 (lost worker:1)")) << result.output;
  EXPECT_EQ(testing::last_json(result.output)["worker_sizes"], nlohmann::json({3, 2}))
      << result.output;
  const double diff = testing::max_relative_difference(weights_in(weights), weights_in(expected));
  std::printf("%s, elastic 3 -> 2: max relative difference %.3g\n", launcher.c_str(), diff);
  EXPECT_LT(diff, 1e-5);
}

// An elastic job under srun (docs/elastic.md): the job's 3 tasks are the most it can have; task 1
// SIGKILLs itself after step 50 of 150 and the other two finish at one device's weights. Slurm
// does not start a task again, and srun's own exit code reports the killed task (137).
TEST(ClusterLaunchTest, SrunElasticJobGoesOnWithoutALostTaskToOneDeviceWeights) {
  testing::TempDir dir;
  START_SLURM(slurm, dir);
  const std::string expected = one_device_weights(150);
  const int port = free_loopback_ports(1).at(0);
  std::vector<std::string> args{"-n", "3", "-O", "--time", "5"};
  const auto task = elastic_task(dir.file("slurm.safetensors"));
  args.insert(args.end(), task.begin(), task.end());
  WorkerProcesses launcher;
  launcher.start(
      find_program("srun"), args,
      {slurm.conf(), "DIST_PORT_BASE=" + std::to_string(port), "DIST_JOB_TOKEN=" + kToken});
  expect_went_on_at_two(launcher.wait_all(240s).at(0), dir.file("slurm.safetensors"), expected,
                        "srun");
}

// Under mpirun an elastic job needs --enable-recovery (otherwise Open MPI ends every rank when
// one dies) and the gloo backend. Rank 1 kills itself after step 50 of 150; mpirun does not
// start it again, so the others finish at 2, with one device's weights.
TEST(ClusterLaunchTest, MpirunWithRecoveryElasticJobGoesOnWithoutALostRankToOneDeviceWeights) {
  const std::string mpirun = find_program("mpirun");
  if (mpirun.empty()) GTEST_SKIP() << "mpirun is not installed (apt-get install openmpi-bin)";
  testing::TempDir dir;
  const std::string expected = one_device_weights(150);
  const int port = free_loopback_ports(1).at(0);
  std::vector<std::string> args;
  if (geteuid() == 0) args.push_back("--allow-run-as-root");
  args.insert(args.end(), {"--oversubscribe", "--enable-recovery", "-np", "3", "-x",
                           "DIST_PORT_BASE", "-x", "DIST_JOB_TOKEN"});
  const auto task = elastic_task(dir.file("mpi.safetensors"));
  args.insert(args.end(), task.begin(), task.end());
  WorkerProcesses launcher;
  launcher.start(mpirun, args,
                 {"DIST_PORT_BASE=" + std::to_string(port), "DIST_JOB_TOKEN=" + kToken});
  const ProcessResult result = launcher.wait_all(240s).at(0);
  EXPECT_TRUE(testing::contains(result.output, "Cluster: 3 workers from Open MPI"))
      << result.output;
  expect_went_on_at_two(result, dir.file("mpi.safetensors"), expected, "mpirun --enable-recovery");
  EXPECT_TRUE(testing::wait_until_store_host_gone(port, 20s));
}

// The child of `parent` whose TF_CONFIG makes it task worker:`index` (dist-launch's workers).
pid_t worker_of(pid_t parent, int index) {
  const std::string task = "\"index\": " + std::to_string(index) + "}";
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ignored)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(line.substr(close + 2));
    char state;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid != parent) continue;
    const std::string env = testing::read_proc_file(entry.path() / "environ");
    if (env.find("TF_CONFIG=") != std::string::npos && env.find(task) != std::string::npos)
      return std::stoi(name);
  }
  return -1;
}

std::string latest_checkpoint(const std::string& dir) {
  std::ifstream in(dir + "/checkpoint");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

// The MPI collective backend under a real mpirun: a worker killed with SIGKILL mid-run makes
// Open MPI's runtime end the job at once, and what the user sees names the rank (the worker's
// index): "mpirun noticed that process rank 1 ... exited on signal 9". Nothing is left.
TEST(ClusterLaunchTest, MpiBackendWorkerKilledEndsTheJobNamingItsRank) {
  const std::string mpirun = find_program("mpirun");
  if (mpirun.empty()) GTEST_SKIP() << "mpirun is not installed (apt-get install openmpi-bin)";
  testing::TempDir dir;
  std::vector<std::string> args;
  if (geteuid() == 0) args.push_back("--allow-run-as-root");
  args.insert(args.end(), {"--oversubscribe", "-np", "2", "-x", "DIST_PORT_BASE", "-x",
                           "DIST_JOB_TOKEN", DIST_TRAIN_BINARY, "--collective-backend", "mpi"});
  for (const auto& a : job_args("multi_worker", dir.file("w.safetensors"), 100000))
    args.push_back(a);
  args.insert(args.end(), {"--checkpoint-dir", dir.file("ckpt"), "--checkpoint-every", "5"});
  WorkerProcesses launcher;
  const std::string token = kToken + std::to_string(getpid());
  launcher.start(mpirun, args,
                 {"DIST_PORT_BASE=" + std::to_string(free_loopback_ports(1).at(0)),
                  "DIST_JOB_TOKEN=" + token});
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (latest_checkpoint(dir.file("ckpt")).empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  pid_t rank_1 = -1;
  for (pid_t pid : testing::processes_of_job(token))
    for (const auto& variable : testing::environment_of(pid))
      if (variable == "OMPI_COMM_WORLD_RANK=1") rank_1 = pid;
  ASSERT_GT(rank_1, 0) << "the process of MPI rank 1 was not found";
  ::kill(rank_1, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  const ProcessResult result = launcher.wait_all(60s).at(0);
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 20s);
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("process rank 1"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("signal 9"), std::string::npos) << result.output;
  // The chief's dist-store-host exits seconds after the last heartbeat, by design.
  const auto gone_by = std::chrono::steady_clock::now() + 15s;
  while (!testing::processes_of_job(token).empty() && std::chrono::steady_clock::now() < gone_by)
    std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(testing::processes_of_job(token).empty()) << "processes of the job still run";
}

// dist-launch --max-restarts 1: worker:1 is killed with SIGKILL after the first checkpoint;
// the launcher stops the job, starts it again, the workers resume from the latest checkpoint,
// and the final weights equal an uninterrupted run's bit for bit.
TEST(ClusterLaunchTest, KilledWorkerUnderMaxRestartsResumesToTheSameWeightsBitForBit) {
  testing::TempDir dir;
  auto launch = [&](const std::string& name, bool kill_worker) {
    std::vector<std::string> args{"--workers", "2", "--max-restarts", "1", "--", DIST_TRAIN_BINARY};
    for (const auto& a : job_args("multi_worker", dir.file(name + ".safetensors"), 150))
      args.push_back(a);
    args.insert(args.end(),
                {"--checkpoint-dir", dir.file(name + "_ckpt"), "--checkpoint-every", "10"});
    WorkerProcesses launcher;
    launcher.start(DIST_LAUNCH_BINARY, args, {});
    if (kill_worker) {
      // After the first checkpoint, with steps still to go.
      const auto deadline = std::chrono::steady_clock::now() + 120s;
      while (latest_checkpoint(dir.file(name + "_ckpt")).empty() &&
             std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(20ms);
      const pid_t worker = worker_of(launcher.pid(0), 1);
      EXPECT_GT(worker, 0) << "worker:1 of dist-launch not found";
      if (worker > 0) ::kill(worker, SIGKILL);
    }
    return launcher.wait_all(300s).at(0);
  };
  const auto whole = launch("whole", false);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto restarted = launch("restarted", true);
  ASSERT_EQ(restarted.exit_code, 0) << restarted.output;
  EXPECT_NE(restarted.output.find("[dist-launch] worker:1 exited with code 137"), std::string::npos)
      << restarted.output;
  EXPECT_NE(restarted.output.find("[dist-launch] restarting the job (restart 1 of 1)"),
            std::string::npos)
      << restarted.output;
  EXPECT_NE(restarted.output.find("[worker:0] Resumed from "), std::string::npos)
      << restarted.output;
  expect_same_weights(dir.file("whole.safetensors"), dir.file("restarted.safetensors"));
}

// Issue 55, 9: an mpirun MPMD job whose ranks ask for different backends. Before, the gloo rank
// timed out in Gloo after 20 s and the mpi rank said nothing; now both name the setting at
// once, as the start-up check names the others.
TEST(ClusterLaunchTest, RanksOfOtherBackendsNameTheDisagreement) {
  const std::string mpirun = find_program("mpirun");
  if (mpirun.empty()) GTEST_SKIP() << "mpirun is not installed (apt-get install openmpi-bin)";
  testing::TempDir dir;
  std::vector<std::string> args;
  if (geteuid() == 0) args.push_back("--allow-run-as-root");
  args.insert(args.end(), {"--oversubscribe", "-x", "DIST_PORT_BASE", "-x", "DIST_JOB_TOKEN"});
  for (const char* backend : {"mpi", "gloo"}) {
    if (std::string(backend) == "gloo") args.push_back(":");
    args.insert(args.end(), {"-np", "1", DIST_TRAIN_BINARY, "--collective-backend", backend});
    for (const auto& a : job_args("multi_worker", dir.file("w.safetensors"), 5)) args.push_back(a);
  }
  WorkerProcesses launcher;
  launcher.start(mpirun, args,
                 {"DIST_PORT_BASE=" + std::to_string(free_loopback_ports(1).at(0)),
                  "DIST_JOB_TOKEN=" + kToken});
  const ProcessResult result = launcher.wait_all(120s).at(0);
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("has the collective backend gloo where worker:0 (127.0.0.1:"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("has mpi (CommunicationOptions::backend"), std::string::npos)
      << result.output;
  // The library names its option; dist-train adds the flag that sets it.
  EXPECT_NE(result.output.find("[dist-train: --collective-backend]"), std::string::npos)
      << result.output;
  std::printf("mpi and gloo ranks: mpirun exited %d after %.1f s\n", result.exit_code,
              result.seconds);
  EXPECT_LT(result.seconds, 60.0) << result.output;
}

// Sends `count` connections of random bytes to 127.0.0.1:port.
void knock_with_garbage(int port, int count) {
  std::mt19937 random(11);
  for (int i = 0; i < count; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0) {
      std::vector<uint8_t> junk(4 + random() % 500);
      for (auto& b : junk) b = static_cast<uint8_t>(random());
      send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    }
    close(fd);
  }
}

TEST(ClusterLaunchTest, StrangersAtTheStorePortLeaveTheJobUndisturbed) {
  testing::TempDir dir;
  auto run_job = [&](const std::string& name, bool attack) {
    const auto ports = free_loopback_ports(2);
    WorkerProcesses workers;
    for (int i = 0; i < 2; ++i)
      workers.start(DIST_TRAIN_BINARY,
                    job_args("multi_worker", dir.file(name + ".safetensors"), 200),
                    {"TF_CONFIG=" + local_tf_config(ports, i), "DIST_JOB_TOKEN=" + kToken});
    std::string stranger;
    if (attack) {
      EXPECT_TRUE(workers.wait_for_output(0, "Number of devices: 2", 120s));
      knock_with_garbage(ports[0], 100);
      try {
        collective::StoreClient client({"127.0.0.1", ports[0]}, 5s,
                                       "not-the-token-of-this-job-0000000");
        client.set("alive/worker:1", {'9'});
        stranger = "admitted";
      } catch (const CollectiveError& e) {
        stranger = e.what();
      }
    }
    auto results = workers.wait_all(300s);
    return std::make_pair(results, stranger);
  };
  const auto [quiet, none] = run_job("quiet", false);
  for (const auto& r : quiet) ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto [attacked, stranger] = run_job("attacked", true);
  for (const auto& r : attacked) ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(stranger.find("the job token does not match"), std::string::npos) << stranger;
  // The chief names the refused connections.
  const std::string& chief = attacked[0].output;
  EXPECT_NE(chief.find("rendezvous store at 127.0.0.1:"), std::string::npos) << chief;
  EXPECT_NE(chief.find(": a wrong job token"), std::string::npos) << chief;
  EXPECT_EQ(chief.find(kToken), std::string::npos) << "the token must not be printed";
  expect_same_weights(dir.file("quiet.safetensors"), dir.file("attacked.safetensors"));
}

}  // namespace
}  // namespace dist
