#include "dist/distribute/local_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "dist/core/error.h"

namespace dist {

namespace {

// The low end of the ports the kernel hands out by itself (to connect(), to bind() to port 0).
int first_ephemeral_port() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768;  // Linux's default when the file cannot be read
  range >> low;
  return low;
}

// A socket bound to 127.0.0.1:port (0: any port), or -1 with errno set.
int bind_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

int port_of(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

}  // namespace

// Chosen below the kernel's own range at random: a port the kernel hands out (binding to port
// 0) may go to any outgoing connection between this check and the job's listen, which is what
// happened under mpirun, whose daemons open connections meanwhile. Falls back to the kernel's
// choice when that range starts too low to leave room.
std::vector<int> free_loopback_ports(int n) {
  std::vector<int> sockets, ports;
  const int low = 10000, high = first_ephemeral_port();
  std::mt19937 random(std::random_device{}());
  for (int tries = 0; static_cast<int>(ports.size()) < n; ++tries) {
    const bool own_range = high - low > 1000 && tries < 1000;
    const int fd =
        bind_loopback(own_range ? std::uniform_int_distribution<int>(low, high - 1)(random) : 0);
    if (fd < 0 && own_range) continue;  // taken: another
    if (fd < 0) {
      const std::string reason = std::strerror(errno);
      for (int s : sockets) close(s);
      throw Error("cannot find a free TCP port on 127.0.0.1: " + reason);
    }
    sockets.push_back(fd);  // held until all are chosen, so the ports are distinct
    ports.push_back(port_of(fd));
  }
  for (int fd : sockets) close(fd);
  return ports;
}

std::string workers_tf_config(const std::vector<std::string>& addresses, int index) {
  std::ostringstream json;
  json << R"({"cluster": {"worker": [)";
  for (size_t i = 0; i < addresses.size(); ++i)
    json << (i ? ", " : "") << '"' << addresses[i] << '"';
  json << R"(]}, "task": {"type": "worker", "index": )" << index << "}}";
  return json.str();
}

std::string local_tf_config(const std::vector<int>& ports, int index) {
  std::vector<std::string> addresses;
  for (int port : ports) addresses.push_back("127.0.0.1:" + std::to_string(port));
  return workers_tf_config(addresses, index);
}

LocalJob::LocalJob(const std::map<std::string, int>& counts) {
  int total = 0;
  for (const auto& [type, count] : counts) total += count;
  const auto free = free_loopback_ports(total);
  size_t next = 0;
  for (const auto& [type, count] : counts)
    for (int i = 0; i < count; ++i) ports_[type].push_back(free[next++]);
}

int LocalJob::port(const std::string& type, int index) const {
  return ports_.at(type).at(static_cast<size_t>(index));
}

std::string LocalJob::tf_config(const std::string& type, int index) const {
  std::ostringstream json;
  json << R"({"cluster": {)";
  bool first_type = true;
  for (const auto& [job, ports] : ports_) {
    if (ports.empty()) continue;
    json << (first_type ? "" : ", ") << '"' << job << "\": [";
    first_type = false;
    for (size_t i = 0; i < ports.size(); ++i)
      json << (i ? ", " : "") << "\"127.0.0.1:" << ports[i] << "\"";
    json << "]";
  }
  json << R"(}, "task": {"type": ")" << type << R"(", "index": )" << index << "}}";
  return json.str();
}

}  // namespace dist
