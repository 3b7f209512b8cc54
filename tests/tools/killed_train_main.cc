// killed_train (test only): dist-train with faults and pauses at chosen points, for the elastic
// tests (dist_train_elastic_test.cc), which start some workers of a job with it:
//
//   killed_train [--kill-at-step N [--kill-worker I]] [--kill-on-loss seen|agreed] [--hold-at-step
//   N
//   --until-file PATH]
//                [any dist-train flags]
//
// --kill-at-step N   SIGKILL itself once its training completes step N (a lost machine)
// --kill-worker I    only if it is worker I of TF_CONFIG (when a launcher starts every worker
//                    with the same command)
// --kill-on-loss S  SIGKILL itself when its generation fails: S = seen (before agreeing on the
//                    next) or agreed (after, before the next forms): a second failure during
//                    the resize
// --print-steps      print "killed_train: step N done at T" after each step and "killed_train:
//                    killed at step N at T" before the kill (T: Unix time in ms), for
//                    bench/elastic_recovery.sh to time a recovery from the kill
// --hold-at-step N   once step N completes, wait until PATH exists (60 s at most), so that a
//                    worker the test starts meanwhile joins before the job ends
// --kill-at-key K    SIGKILL itself as soon as key K appears in the job's rendezvous store
//                    (watched every 5 ms from a thread of its own): a loss at a chosen point
//                    of the start-up, such as "generation/0/joined/worker:1"
// --kill-once-file F with --kill-at-key: only when F does not exist yet (it is made first), so
//                    that the process a launcher starts again does not die the same way
// Otherwise it exits as dist-train does.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "collective/store/store_client.h"
#include "dist/core/error.h"
#include "dist/distribute/cluster_resolver.h"
#include "dist/train/elastic.h"
#include "run_training.h"
#include "train/elastic_test_hooks.h"
#include "train_options.h"

namespace {

struct Faults {
  int64_t kill_at = -1;
  int kill_worker = -1;      // -1: any
  std::string kill_on_loss;  // "seen" or "agreed"; empty: never
  bool print_steps = false;
  int64_t hold_at = -1;
  std::string until_file;
  std::string kill_at_key;
  std::string kill_once_file;
};

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void hold_until(const std::string& path) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(path) && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// --kill-at-key: a detached thread that watches the store of the job in TF_CONFIG.
void kill_when_key_appears(const std::string& key, const std::string& once_file) {
  if (!once_file.empty()) {
    if (std::filesystem::exists(once_file)) return;
    std::ofstream(once_file) << "killed once\n";
  }
  const dist::HostPort store = dist::resolve_cluster().config.cluster.store_address();
  const std::string token = dist::job_token_from_environment();
  const std::string job_id = dist::job_id_from_environment();
  std::thread([store, token, job_id, key] {
    while (true) {
      try {
        dist::collective::StoreClient client(store, std::chrono::seconds(60), token, "", job_id);
        while (true) {
          if (client.check({key})) ::raise(SIGKILL);
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      } catch (const std::exception&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // not up yet, or closing
      }
    }
  }).detach();
}

// The faults' flags out of argv; the rest (dist-train's) into `rest`.
Faults parse_faults(int argc, char** argv, std::vector<char*>& rest) {
  Faults faults;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const bool valued = i + 1 < argc;
    if (flag == "--kill-at-step" && valued)
      faults.kill_at = std::atoll(argv[++i]);
    else if (flag == "--kill-worker" && valued)
      faults.kill_worker = std::atoi(argv[++i]);
    else if (flag == "--hold-at-step" && valued)
      faults.hold_at = std::atoll(argv[++i]);
    else if (flag == "--until-file" && valued)
      faults.until_file = argv[++i];
    else if (flag == "--print-steps")
      faults.print_steps = true;
    else if (flag == "--kill-on-loss" && valued)
      faults.kill_on_loss = argv[++i];
    else if (flag == "--kill-at-key" && valued)
      faults.kill_at_key = argv[++i];
    else if (flag == "--kill-once-file" && valued)
      faults.kill_once_file = argv[++i];
    else
      rest.push_back(argv[i]);
  }
  return faults;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest{argv[0]};
  Faults faults = parse_faults(argc, argv, rest);
  if ((faults.hold_at > 0) != !faults.until_file.empty()) {
    std::cerr << "killed_train: --hold-at-step and --until-file go together" << std::endl;
    return 2;
  }
  dist::tools::CommandLine line =
      dist::tools::parse_command_line(static_cast<int>(rest.size()), rest.data());
  if (line.exit_code) return *line.exit_code;
  if (faults.kill_worker >= 0 && dist::resolve_cluster().config.task.index != faults.kill_worker) {
    faults.kill_at = -1;
    faults.kill_at_key.clear();
  }
  if (!faults.kill_at_key.empty()) kill_when_key_appears(faults.kill_at_key, faults.kill_once_file);
  line.options.after_step = [faults](int64_t step) {
    if (faults.print_steps)
      std::cout << "killed_train: " << (step == faults.kill_at ? "killed at" : "step") << " "
                << step << (step == faults.kill_at ? "" : " done") << " at " << unix_ms()
                << std::endl;
    if (step == faults.kill_at) ::raise(SIGKILL);
    if (step == faults.hold_at) hold_until(faults.until_file);
  };
  if (!faults.kill_on_loss.empty())
    dist::detail::set_elastic_loss_hook([stage = faults.kill_on_loss](const std::string& now) {
      if (now == stage) ::raise(SIGKILL);
    });
  try {
    auto result = dist::tools::run_training(line.options, std::cout);
    if (result.chief) std::cout << dist::tools::to_json_line(result) << std::endl;
    return 0;
  } catch (const dist::InvalidArgument& e) {
    std::cerr << "killed_train: " << e.what() << std::endl;
    return 2;
  } catch (const dist::StopRequested& e) {
    std::cerr << "killed_train: " << e.what() << std::endl;
    return 4;
  } catch (const dist::ElasticJobStopped& e) {
    std::cerr << "killed_train: " << e.what() << std::endl;
    return 5;
  } catch (const std::exception& e) {
    std::cerr << "killed_train: " << e.what() << std::endl;
    return 1;
  }
}
