#include "flag_names.h"

#include <utility>

namespace dist::tools {
namespace {

// A library option's name as its messages write it, and the dist-train flag that sets it.
constexpr std::pair<const char*, const char*> kFlagsOfOptions[] = {
    {"CommunicationOptions::backend", "--collective-backend"},
    {"CommunicationOptions::rendezvous", "--rendezvous"},
    {"coordinator_timeout", "--collective-timeout"},
    {"collective_timeout", "--collective-timeout"},
    {"rendezvous_timeout", "--rendezvous-timeout"},
    {"AutoShardPolicy::kData", "--auto-shard data"},
    {"AutoShardPolicy::kFile", "--auto-shard file"},
    {"save_freq", "--checkpoint-every"},
    {"min_workers", "--min-workers"},
};

}  // namespace

std::string tool_message(const std::string& library_message) {
  std::string flags;
  for (const auto& [option, flag] : kFlagsOfOptions) {
    if (library_message.find(option) == std::string::npos) continue;
    if (flags.find(flag) != std::string::npos) continue;  // two options of one flag
    flags += (flags.empty() ? "" : ", ") + std::string(flag);
  }
  if (flags.empty()) return library_message;
  return library_message + " [dist-train: " + flags + "]";
}

}  // namespace dist::tools
