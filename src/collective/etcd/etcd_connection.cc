#include "collective/etcd/etcd_connection.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "dist/core/error.h"

namespace dist::collective::etcd {
namespace {

std::string variable(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

EtcdSecurity security_from_environment() {
  EtcdSecurity security;
  security.ca_file = variable("DIST_ETCD_CA_FILE");
  security.cert_file = variable("DIST_ETCD_CERT_FILE");
  security.key_file = variable("DIST_ETCD_KEY_FILE");
  security.user = variable("DIST_ETCD_USER");
  const std::string password_file = variable("DIST_ETCD_PASSWORD_FILE");
  DIST_CHECK_ARG(security.user.empty() || !password_file.empty(), "DIST_ETCD_USER='", security.user,
                 "' needs DIST_ETCD_PASSWORD_FILE, a file whose first line is the user's password "
                 "(never on a command line or in the environment)");
  if (!password_file.empty()) {
    const std::string text = read_etcd_file(password_file, "DIST_ETCD_PASSWORD_FILE",
                                            "a regular file whose first line is the password");
    security.password = text.substr(0, text.find('\n'));
    // A file written on Windows ends its line in "\r\n": the '\r' is not the password's.
    if (!security.password.empty() && security.password.back() == '\r')
      security.password.pop_back();
    DIST_CHECK_ARG(!security.user.empty(), "DIST_ETCD_PASSWORD_FILE is set without DIST_ETCD_USER");
  }
  return security;
}

}  // namespace

std::shared_ptr<EtcdClient> shared_etcd_client(const RendezvousAddress& address) {
  DIST_CHECK_ARG(address.is_etcd(), "not an etcd rendezvous: ", address.to_string());
  static std::mutex mutex;
  // Never destroyed: a client's channels must not be torn down after gRPC's own exit handlers.
  static auto* clients = new std::map<std::string, std::shared_ptr<EtcdClient>>();
  std::string members;
  for (const auto& member : address.etcd_members) members += member.to_string() + ",";
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<EtcdClient>& client = (*clients)[members];
  if (!client) {
    EtcdOptions options;
    options.members = address.etcd_members;
    options.security = security_from_environment();
    client = std::make_shared<EtcdClient>(std::move(options));
  }
  return client;
}

c10::intrusive_ptr<EtcdStore> connect_to_etcd(const RendezvousAddress& address,
                                              std::chrono::milliseconds timeout,
                                              const std::string& key_scope) {
  return c10::make_intrusive<EtcdStore>(shared_etcd_client(address), address.etcd_prefix, timeout,
                                        key_scope);
}

}  // namespace dist::collective::etcd
