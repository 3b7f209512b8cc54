#include "dist/collective/rendezvous_address.h"

#include <cstdlib>

#include "dist/core/error.h"

namespace dist {
namespace {

constexpr char kScheme[] = "etcd://";
constexpr char kForm[] = "etcd://host:port[,host:port...]/prefix";

[[noreturn]] void refuse(const std::string& source, const std::string& text,
                         const std::string& problem) {
  throw InvalidArgument(source + "='" + text + "': " + problem + "; write " + kForm +
                        " (an etcd cluster's client addresses and the job's key prefix), or "
                        "nothing for the built-in store");
}

HostPort parse_member(const std::string& source, const std::string& text,
                      const std::string& member) {
  const auto colon = member.rfind(':');
  if (colon == std::string::npos || colon == 0)
    refuse(source, text, "'" + member + "' is not host:port");
  HostPort address{member.substr(0, colon), 0};
  if (address.host.find_first_of(" \t/@?#") != std::string::npos)
    refuse(source, text, "'" + address.host + "' is not a host name");
  const std::string port = member.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    refuse(source, text, "'" + member + "' has no numeric port");
  address.port = std::stoi(port);
  if (address.port < 1 || address.port > 65535)
    refuse(source, text, "port " + port + " is outside 1..65535");
  return address;
}

}  // namespace

std::string RendezvousAddress::to_string() const {
  if (!is_etcd()) return "the built-in store";
  std::string text = kScheme;
  for (size_t i = 0; i < etcd_members.size(); ++i)
    text += (i ? "," : "") + etcd_members[i].to_string();
  return text + etcd_prefix;
}

RendezvousAddress parse_rendezvous_address(const std::string& text, const std::string& source) {
  RendezvousAddress address;
  if (text.empty()) return address;
  if (text.rfind(kScheme, 0) != 0)
    refuse(source, text, "it does not begin with etcd:// (the only rendezvous named by URL)");
  const std::string rest = text.substr(sizeof(kScheme) - 1);
  const auto slash = rest.find('/');
  if (slash == std::string::npos) refuse(source, text, "it names no key prefix after the members");
  const std::string members = rest.substr(0, slash);
  for (size_t start = 0; start <= members.size();) {
    const auto comma = std::min(members.find(',', start), members.size());
    if (comma == start) refuse(source, text, "an etcd member's address is empty");
    address.etcd_members.push_back(
        parse_member(source, text, members.substr(start, comma - start)));
    start = comma + 1;
  }
  std::string prefix = rest.substr(slash);
  if (prefix.back() != '/') prefix += '/';
  if (prefix == "/") refuse(source, text, "the key prefix is empty");
  if (prefix.find("//") != std::string::npos)
    refuse(source, text, "the key prefix '" + prefix + "' holds an empty part ('//')");
  for (const char c : prefix)
    if (static_cast<unsigned char>(c) < 0x21 || c == 0x7f)
      refuse(source, text, "the key prefix holds a space or a control character");
  address.etcd_prefix = prefix;
  return address;
}

RendezvousAddress rendezvous_address_from_environment() {
  const char* text = std::getenv("DIST_RENDEZVOUS");
  return parse_rendezvous_address(text ? text : "", "DIST_RENDEZVOUS");
}

RendezvousAddress rendezvous_address_or_environment(const std::string& text,
                                                    const std::string& source) {
  return text.empty() ? rendezvous_address_from_environment()
                      : parse_rendezvous_address(text, source);
}

}  // namespace dist
