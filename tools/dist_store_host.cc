// dist-store-host: hosts the rendezvous store (src/collective/store/store_server.h) of one
// multi-worker job in its own process, so that it outlives a crashed chief. The chief (collective
// rank 0) starts it; users do not run it by hand.
//
//   dist-store-host --host H --port P --members worker:0,worker:1,worker:2
//                   --rendezvous-timeout-ms N --collective-timeout-ms M --ready-fd FD
// with the job token, if the job has one, in DIST_JOB_TOKEN.
//
// Why a separate process: with the store inside the chief, kill -9 of the chief takes the
// store with it, and the survivors can only say that the store vanished, not which worker was
// lost (the verdict lives in the store). Here the store stays up until the survivors have
// diagnosed and exited.
//
// Start-up: forks at once (before any thread exists) and the parent exits, so the chief can
// reap it immediately and the real host is reparented to init (no zombie in the chief); it
// leaves the chief's session and ignores SIGINT/SIGTERM/SIGHUP, which the workers may handle
// gracefully while still needing the store. It binds H:P (retrying for a while: the previous
// job's host may still be on that port), then writes one line to FD, "ready" or
// "error: <why>", and closes it. Its stdin, stdout and stderr are /dev/null once it has forked.
//
// Exit rule: it reads every member's heartbeat counter "alive/<member>" (bumped twice a second
// by each member's Heartbeat) four times a second. A member is gone once it left on purpose
// ("left/<member>" holds the counter's value when its process ended, and the counter has not
// moved since: a worker that finished or failed with an error), or its counter has not moved for
// 3 s (a killed worker). A member that never connected is gone once every member that did is
// gone (nobody is left to wait for it), or, when none ever did, once the rendezvous timeout has
// passed since the start. Once every member is gone it sets the key "closing" (a member of a
// next job on this address that probes this store then leaves it at once: Rendezvous::connect,
// and the store answers a hello with another job's identity or token kNotThisJob), waits 1 s
// for such probes to leave, and exits 0. So a store outlives its job by its own clean shutdown,
// about 1.3 s, or 3 s more after the last member was killed. As a backstop, it exits 2 once the
// chief (the first member) has been gone for rendezvous + collective timeout + 10 s, the
// longest the survivors can take to fail and exit. With --elastic (an elastic job, whose
// survivors go on without the chief) there is no backstop: the store stays up while any member
// is.
//
// The job's identity comes in DIST_JOB_ID (job_id_from_environment, cluster_resolver.h).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "collective/store/member_list.h"
#include "collective/store/store_server.h"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kStaleAfter{3000};     // 6 missed heartbeats
constexpr milliseconds kPollEvery{250};       // well under the heartbeat period of 500 ms
constexpr milliseconds kClosingGrace{1000};   // for probing clients to disconnect
constexpr milliseconds kBindRetryFor{10000};  // > a previous host's linger after its job ends

struct Options {
  std::string host;
  int port = 0;
  std::vector<std::string> members;
  int64_t rendezvous_timeout_ms = 120000;
  int64_t collective_timeout_ms = 300000;
  int ready_fd = -1;
  bool elastic = false;
  std::string job_token;  // from DIST_JOB_TOKEN (the chief sets it; not on the command line)
  std::string job_id;     // from DIST_JOB_ID
};

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

std::unique_ptr<dist::collective::StoreServer> host_store(const Options& options,
                                                          std::string* error) {
  const auto give_up =
      Clock::now() + std::min(kBindRetryFor, milliseconds(options.rendezvous_timeout_ms));
  while (true) {
    try {
      return std::make_unique<dist::collective::StoreServer>(
          dist::HostPort{options.host, options.port}, options.job_token, options.job_id);
    } catch (const std::exception& e) {
      *error = e.what();
    }
    if (Clock::now() > give_up) return {};
    std::this_thread::sleep_for(milliseconds(200));
  }
}

struct Member {
  bool seen = false;
  int64_t beats = 0;
  Clock::time_point moved;
};

// Reads member `name`'s counter and whether it left (the top comment's rule).
bool gone_now(dist::collective::StoreServer& store, const std::string& name, Member& m,
              Clock::time_point now) {
  const std::string key = "alive/" + name;
  if (!store.check(key)) return false;  // add(key, 0) would create a missing key
  int64_t beats = m.beats;
  try {
    beats = store.add(key, 0);
  } catch (const std::exception&) {  // not a number (no member of ours writes one): unmoved
  }
  if (!m.seen || beats != m.beats) m.moved = now;
  m.seen = true;
  m.beats = beats;
  const std::string left = "left/" + name;
  try {
    if (store.check(left) && store.add(left, 0) >= beats) return true;
  } catch (const std::exception&) {  // not a number: no leave of ours; its beat decides
  }
  return now - m.moved > kStaleAfter;
}

// The exit rule of the top comment; returns the exit code.
int watch(dist::collective::StoreServer& store, const Options& options) {
  const auto start = Clock::now();
  const milliseconds rendezvous(options.rendezvous_timeout_ms);
  const auto backstop =
      rendezvous + milliseconds(options.collective_timeout_ms) + milliseconds(10000);
  std::map<std::string, Member> members;
  bool chief_gone = false;
  Clock::time_point chief_gone_since = start;
  while (true) {
    const auto now = Clock::now();
    bool seen_all_gone = true;
    bool any_seen = false;
    bool chief_now_gone = false;
    for (const auto& name : options.members) {
      Member& m = members[name];
      const bool gone = gone_now(store, name, m, now);
      if (m.seen) {
        any_seen = true;
        seen_all_gone = seen_all_gone && gone;
      }
      if (name == options.members.front())
        chief_now_gone = m.seen ? gone : now - start > rendezvous;
    }
    if (chief_now_gone && !chief_gone) chief_gone_since = now;
    chief_gone = chief_now_gone;
    if (any_seen ? seen_all_gone : now - start > rendezvous) {
      store.set("closing", "1");
      std::this_thread::sleep_for(kClosingGrace);
      return 0;
    }
    if (chief_gone && now - chief_gone_since > backstop && !options.elastic) return 2;
    std::this_thread::sleep_for(kPollEvery);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  std::string members;
  CLI::App app{
      "dist-store-host: the rendezvous store of a multi-worker job (started by its chief)"};
  app.add_option("--host", options.host, "address the members connect to")->required();
  app.add_option("--port", options.port, "TCP port to listen on")
      ->required()
      ->check(CLI::Range(1, 65535));
  app.add_option("--members", members,
                 "task names, comma-separated, collective rank order; a run of one type's indices "
                 "may be written as a range (worker:0-19999)")
      ->required();
  app.add_option("--rendezvous-timeout-ms", options.rendezvous_timeout_ms)
      ->check(CLI::PositiveNumber);
  app.add_option("--collective-timeout-ms", options.collective_timeout_ms)
      ->check(CLI::PositiveNumber);
  app.add_option("--ready-fd", options.ready_fd, "write 'ready' or 'error: ...' here")
      ->required()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--elastic", options.elastic,
               "an elastic job: stay up while any member is, without the chief's backstop");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (const char* token = std::getenv("DIST_JOB_TOKEN")) options.job_token = token;
  if (const char* id = std::getenv("DIST_JOB_ID")) options.job_id = id;
  try {
    options.members = dist::collective::expand_member_list(members);
  } catch (const std::exception& e) {
    std::cerr << "dist-store-host: --members: " << e.what() << std::endl;
    return 2;
  }
  if (options.members.empty()) {
    std::cerr << "dist-store-host: --members lists no task" << std::endl;
    return 2;
  }

  daemonize();  // before any thread: fork keeps only the calling thread
  close_inherited(options.ready_fd);
  // Errors go to the ready line. stderr may be a worker's output pipe (held open, it would
  // delay the EOF its reader waits for) and c10d logs every failed bind attempt there.
  for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO})
    to_dev_null(fd, fd == STDIN_FILENO ? O_RDONLY : O_WRONLY);
  std::string error;
  auto store = host_store(options, &error);
  if (!store) {
    report(options.ready_fd, "error: " + error);
    return 1;
  }
  if (!report(options.ready_fd, "ready")) return 1;  // the chief gave up on us
  const int code = watch(*store, options);
  store.reset();
  return code;
}
