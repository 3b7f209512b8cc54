#include "flags.h"

#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <sstream>

#include "dist/collective/rendezvous_address.h"

namespace dist::launch {
namespace {

// Every worker holds a connection to every other (Gloo's full mesh) and dist-launch one pipe
// per worker, so a job needs about --workers open files in each process, plus a few dozen of
// their own (the store, the data files, the shared-memory group). Raises this process's soft
// limit to its hard one (the workers inherit it); the error, or "", at once rather than after
// spawning thousands of workers that fail with "Too many open files".
std::string check_open_files(const JobSetup& setup) {
  constexpr int64_t kFilesBesideWorkers = 64;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return "";
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  const int64_t tasks = int64_t{setup.workers} + setup.ps + (setup.evaluator ? 1 : 0);
  const int64_t needed = tasks + kFilesBesideWorkers;
  if (limit.rlim_cur == RLIM_INFINITY || needed <= static_cast<int64_t>(limit.rlim_cur)) return "";
  return "--workers " + std::to_string(setup.workers) + " needs about " + std::to_string(needed) +
         " open files in each process (one per other worker, and " +
         std::to_string(kFilesBesideWorkers) + " more), beyond this machine's limit of " +
         std::to_string(limit.rlim_cur) + " (ulimit -n); start at most " +
         std::to_string(static_cast<int64_t>(limit.rlim_cur) - kFilesBesideWorkers - setup.ps -
                        (setup.evaluator ? 1 : 0)) +
         " workers, or raise the limit";
}

}  // namespace

std::string check_setup(const JobSetup& setup, int max_restarts) {
  const std::string ps_only = " needs --ps: only a parameter-server job has ";
  if (setup.ps < 0) return "--ps must be 0 or more, got " + std::to_string(setup.ps);
  if (setup.ps == 0 && setup.restart_workers)
    return "--restart-workers" + ps_only +
           "a coordinator that outlives a worker (a multi-worker job needs every worker: use "
           "--max-restarts)";
  if (setup.ps == 0 && setup.evaluator)
    return "--evaluator" + ps_only + "an evaluator task (add --ps 1 or more)";
  if (setup.ps > 0 && setup.workers < 1)
    return "--workers must be at least 1 with --ps (the workers run the steps), got " +
           std::to_string(setup.workers);
  if (setup.workers < 1 || setup.replicas < 1)
    return "--workers and --replicas-per-worker must be at least 1";
  if (setup.min_workers > 0 && setup.ps > 0)
    return "--workers MIN:MAX (an elastic job) is for multi-worker jobs, not --ps jobs (use "
           "--restart-workers there)";
  if (setup.min_workers > setup.workers)
    return "--workers MIN:MAX needs MIN <= MAX, got " + std::to_string(setup.min_workers) + ":" +
           std::to_string(setup.workers);
  if (!setup.hosts.empty() && setup.ps > 0)
    return "--hosts runs multi-worker jobs only (every task the same command), not --ps jobs";
  if (!setup.rendezvous.empty() && setup.ps > 0)
    return "--rendezvous is for multi-worker jobs (their workers meet there), not --ps jobs";
  try {
    parse_rendezvous_address(setup.rendezvous, "--rendezvous");
  } catch (const std::exception& e) {
    return e.what();
  }
  if (max_restarts < 0)
    return "--max-restarts must be 0 or more, got " + std::to_string(max_restarts);
  return check_open_files(setup);
}

void add_flags(CLI::App& app, JobSetup& setup, int& max_restarts) {
  app.add_option("--workers", setup.workers_text,
                 "worker processes; MIN:MAX starts an elastic job of MAX workers that goes on "
                 "while MIN remain and starts lost ones again to join it (dist-train "
                 "--min-workers, docs/elastic.md)")
      ->capture_default_str();
  app.add_option("--replicas-per-worker", setup.replicas, "replicas in each worker")
      ->capture_default_str();
  app.add_option("--grace-seconds", setup.grace_seconds,
                 "after a failure, SIGKILL workers still running after this long (with --ps: "
                 "after the chief exits, SIGTERM the tasks still running after this long, "
                 "SIGKILL them after as long again)")
      ->capture_default_str();
  app.add_option("--max-restarts", max_restarts,
                 "when a worker fails, stop all and start the job again this many times at most "
                 "(dist-train resumes from the latest checkpoint in its --checkpoint-dir); with "
                 "--ps, when the chief fails")
      ->capture_default_str();
  app.add_option("--ps", setup.ps,
                 "ps tasks; more than 0 makes a parameter-server job of one chief, --workers "
                 "workers and these ps tasks, which ends when the chief does")
      ->capture_default_str();
  app.add_flag("--evaluator", setup.evaluator, "with --ps: one evaluator task too");
  app.add_option("--evaluator-seconds", setup.evaluator_seconds,
                 "with --evaluator: after the chief succeeded, how long the evaluator has to "
                 "evaluate the last checkpoint and exit by itself before SIGTERM")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--restart-workers", setup.restart_workers,
               "with --ps: start a worker that fails again while the chief runs (at most " +
                   std::to_string(kMaxWorkerRestarts) + " times per worker)");
  // One string, split here: CLI11's own splitting drops empty items, and an option whose
  // values all vanish made it take the worker's flags for its own ("The following arguments
  // were not expected").
  app.add_option("--hosts", setup.hosts_text,
                 "run the workers on these hosts (comma-separated addresses or names), worker i "
                 "on host i modulo their count, through --host-command; --workers defaults to "
                 "their count");
  app.add_option("--host-command", setup.host_command,
                 "with --hosts: the command that runs a shell command line on a host, its words "
                 "split at spaces, {host} replaced by the host; the line (which reads the job "
                 "token from stdin) comes last")
      ->capture_default_str();
  app.add_option("--port-base", setup.port_base,
                 "with --hosts: the first worker on each host listens on this port, the next on "
                 "the one above (default: DIST_PORT_BASE, else " +
                     std::to_string(kDefaultPortBase) + ")")
      ->check(CLI::Range(1, 65535));
  app.add_option("--rendezvous", setup.rendezvous,
                 "where the workers meet: etcd://host:port,host:port/prefix (an etcd cluster "
                 "that holds the job's state outside every worker; each restart takes the prefix "
                 "over once the previous one's workers are gone); default: the built-in store");
  app.add_option("command", setup.command, "the worker command, after --")->required();
}

std::string parse_workers(JobSetup& setup) {
  const std::string& text = setup.workers_text;
  const auto colon = text.find(':');
  try {
    size_t used = 0;
    setup.workers = std::stoi(text.substr(colon == std::string::npos ? 0 : colon + 1), &used);
    if (colon != std::string::npos) {
      size_t min_used = 0;
      setup.min_workers = std::stoi(text.substr(0, colon), &min_used);
      if (min_used != colon || setup.min_workers < 1) throw std::invalid_argument(text);
      used += colon + 1;
    }
    if (used != text.size()) throw std::invalid_argument(text);
  } catch (const std::exception&) {
    return "--workers must be a count (2) or MIN:MAX (2:4), got '" + text + "'";
  }
  return "";
}

std::string apply_hosts(JobSetup& setup, bool hosts_given, bool workers_given) {
  if (!hosts_given) return "";
  std::string host;
  std::istringstream items(setup.hosts_text + ",");  // "a," is "a" and an empty one
  int number = 0;
  while (std::getline(items, host, ',')) {
    ++number;
    if (host.empty())
      return "--hosts '" + setup.hosts_text + "': host " + std::to_string(number) +
             " is empty; list host addresses or names separated by single commas";
    setup.hosts.push_back(host);
  }
  if (!workers_given) setup.workers = static_cast<int>(setup.hosts.size());
  if (setup.port_base == 0) {
    const char* base = std::getenv("DIST_PORT_BASE");
    try {
      setup.port_base = base && *base ? std::stoi(base) : kDefaultPortBase;
    } catch (const std::exception&) {
      return std::string("DIST_PORT_BASE='") + base + "' is not a port number";
    }
  }
  if (setup.port_base < 1 || setup.port_base + setup.workers > 65536)
    return "the workers' ports " + std::to_string(setup.port_base) + ".. do not fit in 1..65535";
  for (const auto& host : setup.hosts)
    if (host.empty() || host.find_first_of(" \t\n'\"") != std::string::npos)
      return "--hosts: '" + host + "' is not a host address or name";
  if (setup.host_command.find_first_not_of(" \t") == std::string::npos)
    return "--host-command is empty";
  return "";
}

}  // namespace dist::launch
