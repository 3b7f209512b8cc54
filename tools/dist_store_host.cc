// dist-store-host: hosts the rendezvous store (dist/collective/rendezvous_store.h) of one
// multi-worker job in its own process, so that it outlives a crashed chief. The chief (collective
// rank 0) starts it; users do not run it by hand.
//
//   dist-store-host --host H --port P --members worker:0,worker:1,worker:2
//                   --rendezvous-timeout-ms N --collective-timeout-ms M --ready-fd FD
// with the job token, if the job has one, in DIST_JOB_TOKEN.
//
// Why a separate process, and when it exits: dist/collective/rendezvous_store.h (exit code 0
// once every member is gone, 2 from the backstop).
//
// Start-up: forks at once (before any thread exists) and the parent exits, so the chief can
// reap it immediately and the real host is reparented to init (no zombie in the chief); it
// leaves the chief's session and ignores SIGINT/SIGTERM/SIGHUP, which the workers may handle
// gracefully while still needing the store. It binds H:P (retrying for a while: the previous
// job's host may still be on that port), then writes one line to FD, "ready" or
// "error: <why>", and closes it. Its stdin, stdout and stderr are /dev/null once it has forked.
//
// The job's identity comes in DIST_JOB_ID (job_id_from_environment, cluster_resolver.h).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "dist/collective/rendezvous_store.h"

namespace {

// Detaches from the chief: its parent (the process the chief spawned) exits at once.
void daemonize() {
  const pid_t child = fork();
  if (child < 0) {
    std::cerr << "dist-store-host: fork failed: " << std::strerror(errno) << std::endl;
    _exit(1);
  }
  if (child > 0) _exit(0);
  setsid();  // signals to the chief's process group (Ctrl-C, dist-launch) do not reach it
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(signal, SIG_IGN);
}

// Closes every inherited descriptor but stdin/stdout/stderr and the ready pipe: holding the
// chief's sockets or its output pipe open would delay the EOF its readers wait for.
void close_inherited(int keep) {
  if (keep > 3) close_range(3, static_cast<unsigned>(keep - 1), 0);
  close_range(static_cast<unsigned>(keep + 1), ~0U, 0);
}

void to_dev_null(int fd, int flags) {
  const int null = open("/dev/null", flags);
  if (null >= 0 && null != fd) {
    dup2(null, fd);
    close(null);
  }
}

// Writes the ready line; false if the chief is no longer reading (it gave up waiting).
bool report(int fd, const std::string& line) {
  const std::string text = line + "\n";
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

// The command line, as given; main turns it into the store's options.
struct Flags {
  std::string host;
  int port = 0;
  std::string members;
  int64_t rendezvous_timeout_ms = 120000;
  int64_t collective_timeout_ms = 300000;
  int ready_fd = -1;
  bool elastic = false;
};

void add_flags(CLI::App& app, Flags& flags) {
  app.add_option("--host", flags.host, "address the members connect to")->required();
  app.add_option("--port", flags.port, "TCP port to listen on")
      ->required()
      ->check(CLI::Range(1, 65535));
  app.add_option("--members", flags.members,
                 "task names, comma-separated, collective rank order; a run of one type's indices "
                 "may be written as a range (worker:0-19999)")
      ->required();
  app.add_option("--rendezvous-timeout-ms", flags.rendezvous_timeout_ms)
      ->check(CLI::PositiveNumber);
  app.add_option("--collective-timeout-ms", flags.collective_timeout_ms)
      ->check(CLI::PositiveNumber);
  app.add_option("--ready-fd", flags.ready_fd, "write 'ready' or 'error: ...' here")
      ->required()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--elastic", flags.elastic,
               "an elastic job: stay up while any member is, without the chief's backstop");
}

// The store's options from the flags and the environment (the token is on no command line).
// The error for a bad --members, or "".
std::string store_options(const Flags& flags, dist::RendezvousStoreOptions& options) {
  options.address = dist::HostPort{flags.host, flags.port};
  options.rendezvous_timeout = std::chrono::milliseconds(flags.rendezvous_timeout_ms);
  options.collective_timeout = std::chrono::milliseconds(flags.collective_timeout_ms);
  options.elastic = flags.elastic;
  if (const char* token = std::getenv("DIST_JOB_TOKEN")) options.job_token = token;
  if (const char* id = std::getenv("DIST_JOB_ID")) options.job_id = id;
  try {
    options.members = dist::RendezvousStore::parse_members(flags.members);
  } catch (const std::exception& e) {
    return std::string("--members: ") + e.what();
  }
  if (options.members.empty()) return "--members lists no task";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{
      "dist-store-host: the rendezvous store of a multi-worker job (started by its chief)"};
  add_flags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  dist::RendezvousStoreOptions options;
  if (const std::string error = store_options(flags, options); !error.empty()) {
    std::cerr << "dist-store-host: " << error << std::endl;
    return 2;
  }

  daemonize();  // before any thread: fork keeps only the calling thread
  close_inherited(flags.ready_fd);
  // Errors go to the ready line. stderr may be a worker's output pipe (held open, it would
  // delay the EOF its reader waits for) and c10d logs every failed bind attempt there.
  for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO})
    to_dev_null(fd, fd == STDIN_FILENO ? O_RDONLY : O_WRONLY);
  std::unique_ptr<dist::RendezvousStore> store;
  try {
    store = std::make_unique<dist::RendezvousStore>(std::move(options));
  } catch (const std::exception& e) {
    report(flags.ready_fd, std::string("error: ") + e.what());
    return 1;
  }
  if (!report(flags.ready_fd, "ready")) return 1;  // the chief gave up on us
  const int code = store->serve_until_job_ends();
  store.reset();
  return code;
}
