#include "core/process_state.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <sstream>

namespace dist::detail {
namespace {

// Changes at every boot: a pid of an earlier boot names nothing now.
std::string boot_id() {
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string id;
  file >> id;
  return id;
}

}  // namespace

uint64_t pid_namespace() {
  struct stat s {};
  return ::stat("/proc/self/ns/pid", &s) == 0 ? static_cast<uint64_t>(s.st_ino) : 0;
}

bool process_ended(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');  // the command may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;
  const char state = text[paren + 2];
  return state == 'Z' || state == 'X';
}

std::string process_identity() {
  return boot_id() + " " + std::to_string(pid_namespace()) + " " + std::to_string(::getpid());
}

bool identified_process_ended(const std::string& identity) {
  std::istringstream words(identity);
  std::string boot;
  uint64_t pid_ns = 0;
  pid_t pid = 0;
  if (!(words >> boot >> pid_ns >> pid) || pid <= 0) return false;
  if (boot.empty() || boot != boot_id() || pid_ns != pid_namespace()) return false;
  return process_ended(pid);
}

}  // namespace dist::detail
