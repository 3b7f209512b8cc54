#include "dist/distribute/cluster_resolver.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>

#include "dist/core/error.h"
#include "distribute/cluster/host_name.h"

extern char** environ;

namespace dist {
namespace {

// Far more hosts than any cluster has: a typo such as "n[1-99999999]" is an error, not a hang.
constexpr size_t kMaxHosts = 1 << 20;
constexpr int kDefaultPortBase = 8888;  // TensorFlow's SlurmClusterResolver's

[[noreturn]] void bad(const std::string& variable, const std::string& value,
                      const std::string& problem) {
  throw InvalidArgument(variable + "='" + value + "': " + problem);
}

std::optional<std::string> lookup(const EnvironmentVariables& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

// The first of `names` that is set, with its name.
std::optional<std::pair<std::string, std::string>> first_of(const EnvironmentVariables& env,
                                                            const std::vector<std::string>& names) {
  for (const auto& name : names)
    if (auto value = lookup(env, name)) return std::make_pair(name, *value);
  return std::nullopt;
}

int64_t parse_integer(const std::string& variable, const std::string& value, int64_t min,
                      int64_t max) {
  if (value.empty() || value.size() > 18 ||
      value.find_first_not_of("0123456789") != std::string::npos)
    bad(variable, value, "not a non-negative integer");
  const int64_t n = std::stoll(value);
  if (n < min || n > max)
    bad(variable, value, "outside " + std::to_string(min) + ".." + std::to_string(max));
  return n;
}

int required_integer(const EnvironmentVariables& env, const std::vector<std::string>& names,
                     int min, const std::string& launcher) {
  auto found = first_of(env, names);
  if (!found) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : " or ") + n;
    throw InvalidArgument(list + " is not set: " + launcher + " sets it for every task");
  }
  return static_cast<int>(
      parse_integer(found->first, found->second, min, std::numeric_limits<int>::max()));
}

// One entry of a host list, such as "rack[1-2]-node[01-03]": every combination of its groups.
void expand_entry(const std::string& entry, const std::string& variable, const std::string& list,
                  std::vector<std::string>& hosts) {
  std::vector<std::string> partial{""};
  size_t i = 0;
  while (i < entry.size()) {
    const size_t open = entry.find('[', i);
    const std::string literal = entry.substr(i, open == std::string::npos ? open : open - i);
    if (literal.find(']') != std::string::npos) bad(variable, list, "']' without '['");
    for (auto& p : partial) p += literal;
    if (open == std::string::npos) break;
    const size_t close = entry.find(']', open);
    if (close == std::string::npos) bad(variable, list, "'[' without ']'");
    const std::string ranges = entry.substr(open + 1, close - open - 1);
    if (ranges.empty()) bad(variable, list, "an empty range '[]'");
    std::vector<std::string> numbers;
    size_t start = 0;
    while (start <= ranges.size()) {
      size_t comma = ranges.find(',', start);
      if (comma == std::string::npos) comma = ranges.size();
      const std::string range = ranges.substr(start, comma - start);
      const size_t dash = range.find('-');
      const std::string low = range.substr(0, dash);
      const std::string high = dash == std::string::npos ? low : range.substr(dash + 1);
      const auto digits = [](const std::string& s) {
        return !s.empty() && s.size() <= 9 &&
               s.find_first_not_of("0123456789") == std::string::npos;
      };
      if (!digits(low) || !digits(high))
        bad(variable, list, "'" + range + "' is not a number or a range such as 01-04");
      const long lo = std::stol(low), hi = std::stol(high);
      if (lo > hi) bad(variable, list, "the range '" + range + "' runs backwards");
      if (static_cast<size_t>(hi - lo) >= kMaxHosts)
        bad(variable, list, "the range '" + range + "' has more hosts than any cluster");
      for (long n = lo; n <= hi; ++n) {
        std::string s = std::to_string(n);
        if (s.size() < low.size()) s.insert(0, low.size() - s.size(), '0');
        numbers.push_back(std::move(s));
      }
      start = comma + 1;
    }
    std::vector<std::string> next;
    for (const auto& p : partial)
      for (const auto& n : numbers) next.push_back(p + n);
    if (next.size() > kMaxHosts) bad(variable, list, "more hosts than any cluster");
    partial = std::move(next);
    i = close + 1;
  }
  for (auto& p : partial) {
    if (p.empty()) bad(variable, list, "an empty host name");
    hosts.push_back(std::move(p));
  }
}

// Validates DIST_PORT_BASE and returns it.
int port_base(const EnvironmentVariables& env, int tasks_on_busiest_node) {
  auto value = lookup(env, "DIST_PORT_BASE");
  if (!value) return kDefaultPortBase;
  return static_cast<int>(
      parse_integer("DIST_PORT_BASE", *value, 1, 65536 - std::max(1, tasks_on_busiest_node)));
}

// The variable a Slurm or MPI job's node names came from, for messages.
std::string node_list_source(const EnvironmentVariables& env) {
  if (lookup(env, "SLURM_PROCID")) return "Slurm's SLURM_STEP_NODELIST or SLURM_JOB_NODELIST";
  return "the MPI launcher's host list";
}

// Workers in blocks over `nodes`, `tasks_per_node[i]` on node i.
ClusterConfig block_placement(const std::vector<std::string>& nodes,
                              const std::vector<int>& tasks_per_node, int rank,
                              const EnvironmentVariables& env) {
  const int busiest = *std::max_element(tasks_per_node.begin(), tasks_per_node.end());
  const int base = port_base(env, busiest);
  std::vector<std::string> workers;
  for (size_t node = 0; node < nodes.size(); ++node) {
    // Named by where it came from: these names are not TF_CONFIG's.
    if (const std::string problem = detail::host_name_problem(nodes[node]); !problem.empty())
      throw InvalidArgument("node " + std::to_string(node) + " of this job's node list (" +
                            node_list_source(env) + "): " + problem);
  }
  for (size_t node = 0; node < nodes.size(); ++node)
    for (int local = 0; local < tasks_per_node[node]; ++local)
      workers.push_back(nodes[node] + ":" + std::to_string(base + local));
  if (auto coordinator = lookup(env, "DIST_COORDINATOR_ADDRESS")) {
    // Validated like a TF_CONFIG address, then it takes worker 0's place.
    try {
      ClusterSpec({{"worker", {*coordinator}}});
    } catch (const InvalidArgument&) {
      bad("DIST_COORDINATOR_ADDRESS", *coordinator, "not host:port with a port in 1..65535");
    }
    workers[0] = *coordinator;
  }
  ClusterConfig config;
  config.cluster = ClusterSpec({{"worker", workers}});
  config.task = {"worker", rank};
  return config;
}

// Where block placement puts `rank`: its node and its index on the node.
std::pair<size_t, int> place(const std::vector<int>& tasks_per_node, int rank) {
  int first = 0;
  for (size_t node = 0; node < tasks_per_node.size(); ++node) {
    if (rank < first + tasks_per_node[node]) return {node, rank - first};
    first += tasks_per_node[node];
  }
  return {tasks_per_node.size(), 0};  // unreachable: the caller checked rank < the sum
}

}  // namespace

EnvironmentVariables process_environment() {
  EnvironmentVariables env;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string text = *entry;
    const size_t eq = text.find('=');
    if (eq != std::string::npos) env[text.substr(0, eq)] = text.substr(eq + 1);
  }
  return env;
}

std::vector<std::string> expand_slurm_node_list(const std::string& list,
                                                const std::string& variable) {
  std::vector<std::string> hosts;
  if (list.empty()) bad(variable, list, "empty");
  // Split at the commas outside brackets.
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] == '[') ++depth;
    if (i < list.size() && list[i] == ']') --depth;
    if (depth < 0) bad(variable, list, "']' without '['");
    if (depth > 1) bad(variable, list, "nested brackets");
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      const std::string entry = list.substr(start, i - start);
      if (entry.empty()) bad(variable, list, "an empty host name");
      expand_entry(entry, variable, list, hosts);
      if (hosts.size() > kMaxHosts) bad(variable, list, "more hosts than any cluster");
      start = i + 1;
    }
  }
  if (depth != 0) bad(variable, list, "'[' without ']'");
  return hosts;
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& spec, const std::string& variable) {
  std::vector<int> counts;
  if (spec.empty()) bad(variable, spec, "empty");
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string::npos) comma = spec.size();
    const std::string part = spec.substr(start, comma - start);
    const size_t paren = part.find('(');
    const std::string count = part.substr(0, paren);
    int64_t repeat = 1;
    if (paren != std::string::npos) {
      if (part.size() < paren + 4 || part.compare(paren, 2, "(x") != 0 || part.back() != ')')
        bad(variable, spec, "'" + part + "' is not N or N(xM)");
      repeat = parse_integer(variable, part.substr(paren + 2, part.size() - paren - 3), 1,
                             static_cast<int64_t>(kMaxHosts));
    }
    if (count.empty() || count.find_first_not_of("0123456789") != std::string::npos ||
        count.size() > 6)
      bad(variable, spec, "'" + part + "' is not N or N(xM)");
    const int n = std::stoi(count);
    if (n < 1) bad(variable, spec, "a node with no tasks");
    if (counts.size() + static_cast<size_t>(repeat) > kMaxHosts)
      bad(variable, spec, "more nodes than any cluster");
    counts.insert(counts.end(), static_cast<size_t>(repeat), n);
    start = comma + 1;
  }
  return counts;
}

SlurmClusterResolver::SlurmClusterResolver(const EnvironmentVariables& env) {
  const std::string slurm = "srun";
  const int tasks = required_integer(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, 1, slurm);
  const int rank = required_integer(env, {"SLURM_PROCID"}, 0, slurm);
  if (rank >= tasks)
    bad("SLURM_PROCID", std::to_string(rank),
        "not below the task count " + std::to_string(tasks) + " (SLURM_NTASKS)");
  const int local = required_integer(env, {"SLURM_LOCALID"}, 0, slurm);
  auto list = first_of(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (!list)
    throw InvalidArgument(
        "SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST) is not set: start the workers with srun");
  const auto nodes = expand_slurm_node_list(list->second, list->first);
  std::vector<int> per_node;
  if (auto spec = first_of(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})) {
    per_node = expand_slurm_tasks_per_node(spec->second, spec->first);
    if (per_node.size() != nodes.size())
      bad(spec->first, spec->second,
          "describes " + std::to_string(per_node.size()) + " nodes, but " + list->first +
              " lists " + std::to_string(nodes.size()));
    const int sum = std::accumulate(per_node.begin(), per_node.end(), 0);
    if (sum != tasks)
      bad(spec->first, spec->second,
          "adds up to " + std::to_string(sum) + " tasks, but the job has " + std::to_string(tasks));
  } else {
    if (tasks % static_cast<int>(nodes.size()) != 0)
      throw InvalidArgument("SLURM_STEP_TASKS_PER_NODE is not set and " + std::to_string(tasks) +
                            " tasks do not divide evenly over the " + std::to_string(nodes.size()) +
                            " nodes of " + list->first);
    per_node.assign(nodes.size(), tasks / static_cast<int>(nodes.size()));
  }
  const auto [node, index] = place(per_node, rank);
  const auto here = lookup(env, "SLURMD_NODENAME");
  if (index != local || (here && *here != nodes[node]))
    throw InvalidArgument("Slurm placed task " + std::to_string(rank) + " on node " +
                          (here ? *here : std::string("(unnamed: SLURMD_NODENAME is not set)")) +
                          " as local task " + std::to_string(local) +
                          ", but block placement puts it on " + nodes[node] + " as local task " +
                          std::to_string(index) +
                          ": start the workers with srun --distribution=block");
  config_ = block_placement(nodes, per_node, rank, env);
}

MpiClusterResolver::MpiClusterResolver(const EnvironmentVariables& env) {
  const bool open_mpi = lookup(env, "OMPI_COMM_WORLD_RANK").has_value();
  const std::string launcher = open_mpi ? "Open MPI's mpirun" : "MPICH's mpiexec (Hydra)";
  const std::string prefix = open_mpi ? "OMPI_COMM_WORLD_" : "PMI_";
  const int size = required_integer(env, {prefix + "SIZE"}, 1, launcher);
  const int rank = required_integer(env, {prefix + "RANK"}, 0, launcher);
  if (rank >= size)
    bad(prefix + "RANK", std::to_string(rank),
        "not below " + prefix + "SIZE " + std::to_string(size));
  const std::string local_rank_name = open_mpi ? "OMPI_COMM_WORLD_LOCAL_RANK" : "MPI_LOCALRANKID";
  const std::string local_size_name = open_mpi ? "OMPI_COMM_WORLD_LOCAL_SIZE" : "MPI_LOCALNRANKS";
  const int local_rank = required_integer(env, {local_rank_name}, 0, launcher);
  const int local_size = required_integer(env, {local_size_name}, 1, launcher);
  if (local_rank >= local_size)
    bad(local_rank_name, std::to_string(local_rank),
        "not below " + local_size_name + " " + std::to_string(local_size));

  std::vector<std::string> nodes;
  if (auto list = first_of(env, {"DIST_NODE_LIST", "SLURM_JOB_NODELIST"})) {
    nodes = expand_slurm_node_list(list->second, list->first);
  } else if (local_size == size) {
    nodes = {"127.0.0.1"};  // the whole job is on this machine
  } else {
    throw InvalidArgument(
        "this MPI job spans several nodes (" + local_size_name + "=" + std::to_string(local_size) +
        " of " + prefix + "SIZE=" + std::to_string(size) +
        "), and MPI does not tell a process the others: set DIST_NODE_LIST to the nodes in rank "
        "order, e.g. DIST_NODE_LIST=node[01-04] (pass it with mpirun -x DIST_NODE_LIST)");
  }
  if (static_cast<int64_t>(nodes.size()) * local_size != size)
    throw InvalidArgument(std::to_string(nodes.size()) + " nodes x " + local_size_name + "=" +
                          std::to_string(local_size) + " ranks per node is not " + prefix +
                          "SIZE=" + std::to_string(size) +
                          ": start the same number of ranks on every node "
                          "(mpirun --npernode), and list exactly those nodes");
  const std::vector<int> per_node(nodes.size(), local_size);
  if (place(per_node, rank).second != local_rank)
    throw InvalidArgument(
        launcher + " placed rank " + std::to_string(rank) + " as local rank " +
        std::to_string(local_rank) + ", but block placement makes it local rank " +
        std::to_string(rank % local_size) + ": place ranks by slot (mpirun --map-by slot)");
  config_ = block_placement(nodes, per_node, rank, env);
}

void check_job_token(const std::string& token, const std::string& source) {
  DIST_CHECK_ARG(token.size() >= 16 && token.size() <= 1024, source, " is ", token.size(),
                 " characters long; a job token needs 16 to 1024 random characters (e.g. "
                 "'head -c 32 /dev/urandom | od -An -tx1 | tr -d \" \\n\"')");
  for (const char c : token)
    DIST_CHECK_ARG(c > ' ' && c < 127, source,
                   " holds a space or a non-printable character; use printable ASCII only");
}

namespace {

// The first line of the token file, read without blocking and without reading more than a token
// can be: a FIFO with no writer, a device such as /dev/zero or a huge file must not hang or fill
// memory (1 KiB of token, a CR and a newline at most).
std::string first_line_of_token_file(const std::string& path) {
  const std::string name = "DIST_JOB_TOKEN_FILE='" + path + "'";
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  DIST_CHECK_ARG(fd >= 0, name, ": cannot open it (", std::strerror(errno),
                 "); point it at a readable file that holds the job token");
  struct stat info {};
  const bool regular = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode);
  if (!regular) {
    ::close(fd);
    throw InvalidArgument(name + " is not a regular file (a directory, FIFO, socket or device); " +
                          "write the token into a regular file");
  }
  constexpr size_t kMaxLine = 1024 + 2;
  std::string bytes(kMaxLine, '\0');
  size_t length = 0;
  while (length < kMaxLine) {
    const ssize_t got = ::read(fd, &bytes[length], kMaxLine - length);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    length += static_cast<size_t>(got);
  }
  ::close(fd);
  bytes.resize(length);
  DIST_CHECK_ARG(!bytes.empty(), name,
                 " is empty; write the job token (16 to 1024 printable characters) into it");
  const size_t newline = bytes.find('\n');
  DIST_CHECK_ARG(newline != std::string::npos || length < kMaxLine, name,
                 ": its first line is longer than 1024 characters; a job token needs 16 to "
                 "1024 printable characters");
  std::string line = bytes.substr(0, newline);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

}  // namespace

std::string job_token_from_environment(const EnvironmentVariables& env) {
  const auto token = lookup(env, "DIST_JOB_TOKEN");
  const auto file = lookup(env, "DIST_JOB_TOKEN_FILE");
  DIST_CHECK_ARG(!(token && file),
                 "both DIST_JOB_TOKEN and DIST_JOB_TOKEN_FILE are set; set only one");
  if (token) {
    check_job_token(*token, "DIST_JOB_TOKEN");
    return *token;
  }
  if (!file) return "";
  const std::string line = first_line_of_token_file(*file);
  check_job_token(line, "the token in DIST_JOB_TOKEN_FILE='" + *file + "'");
  return line;
}

std::string job_id_from_environment(const EnvironmentVariables& env) {
  if (const auto id = lookup(env, "DIST_JOB_ID")) {
    const bool printable = std::all_of(id->begin(), id->end(), [](char c) {
      return std::isgraph(static_cast<unsigned char>(c)) != 0;
    });
    DIST_CHECK_ARG(!id->empty() && id->size() <= 256 && printable, "DIST_JOB_ID='", *id,
                   "' is not a job identity: use 1 to 256 printable characters without spaces "
                   "(or unset it)");
    return *id;
  }
  const auto slurm_job = lookup(env, "SLURM_JOB_ID");
  if (slurm_job && !slurm_job->empty())
    return "slurm:" + *slurm_job + "." + lookup(env, "SLURM_STEP_ID").value_or("");
  const auto namespace_of_mpirun = lookup(env, "PMIX_NAMESPACE");
  if (namespace_of_mpirun && !namespace_of_mpirun->empty()) return "pmix:" + *namespace_of_mpirun;
  return "";
}

ResolvedCluster resolve_cluster(const EnvironmentVariables& env) {
  std::string choice;
  if (auto named = lookup(env, "DIST_CLUSTER_RESOLVER")) {
    choice = *named;
    if (choice != "tf_config" && choice != "slurm" && choice != "mpi")
      bad("DIST_CLUSTER_RESOLVER", choice, "use tf_config, slurm or mpi (or leave it unset)");
  } else if (lookup(env, "TF_CONFIG")) {
    choice = "tf_config";
  } else if (lookup(env, "OMPI_COMM_WORLD_RANK") || lookup(env, "PMI_RANK")) {
    choice = "mpi";
  } else if (lookup(env, "SLURM_PROCID")) {
    choice = "slurm";
  } else {
    throw InvalidArgument(
        "no cluster found: a multi-worker job needs TF_CONFIG, or workers started by srun "
        "(Slurm) or mpirun (Open MPI, MPICH); dist-launch starts a local job");
  }
  if (choice == "tf_config") {
    auto text = lookup(env, "TF_CONFIG");
    DIST_CHECK_ARG(text.has_value(), "DIST_CLUSTER_RESOLVER=tf_config, but TF_CONFIG is not set");
    return {parse_tf_config(*text), "TF_CONFIG"};
  }
  if (choice == "mpi") {
    const bool open_mpi = lookup(env, "OMPI_COMM_WORLD_RANK").has_value();
    if (!open_mpi && !lookup(env, "PMI_RANK"))
      throw InvalidArgument(
          "DIST_CLUSTER_RESOLVER=mpi, but neither OMPI_COMM_WORLD_RANK nor PMI_RANK is set: "
          "start the workers with mpirun");
    return {MpiClusterResolver(env).config(), open_mpi ? "Open MPI" : "MPICH (PMI)"};
  }
  return {SlurmClusterResolver(env).config(), "Slurm"};
}

}  // namespace dist
