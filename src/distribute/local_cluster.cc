#include "distribute/local_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "dist/core/error.h"

namespace dist {

std::vector<int> free_loopback_ports(int n) {
  std::vector<int> sockets, ports;
  for (int i = 0; i < n; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      const std::string reason = std::strerror(errno);
      if (fd >= 0) close(fd);
      for (int s : sockets) close(s);
      throw Error("cannot find a free TCP port on 127.0.0.1: " + reason);
    }
    sockets.push_back(fd);  // held until all are chosen, so the ports are distinct
    ports.push_back(ntohs(addr.sin_port));
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
