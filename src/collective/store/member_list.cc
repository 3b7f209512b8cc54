#include "collective/store/member_list.h"

#include <cstdint>
#include <optional>
#include <utility>

#include "dist/core/error.h"

namespace dist::collective {
namespace {

// ("worker", 3) for "worker:3"; nothing for a name without a ":<digits>" ending.
std::optional<std::pair<std::string, int64_t>> type_and_index(const std::string& name) {
  const size_t colon = name.rfind(':');
  if (colon == std::string::npos || colon + 1 == name.size() || name.size() - colon > 10)
    return std::nullopt;
  int64_t index = 0;
  for (size_t i = colon + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    index = index * 10 + (name[i] - '0');
  }
  // "worker:07" would not come back as itself.
  if (name.size() - colon > 2 && name[colon + 1] == '0') return std::nullopt;
  return std::make_pair(name.substr(0, colon), index);
}

}  // namespace

std::string compact_member_list(const std::vector<std::string>& members) {
  std::string text;
  for (size_t i = 0; i < members.size();) {
    const auto first = type_and_index(members[i]);
    size_t end = i + 1;
    while (first && end < members.size()) {
      const auto next = type_and_index(members[end]);
      if (!next || next->first != first->first ||
          next->second != first->second + static_cast<int64_t>(end - i))
        break;
      ++end;
    }
    if (!text.empty()) text += ',';
    text += members[i];
    if (end - i > 1)
      text += '-' + std::to_string(first->second + static_cast<int64_t>(end - i - 1));
    i = end;
  }
  return text;
}

std::vector<std::string> expand_member_list(const std::string& text) {
  std::vector<std::string> members;
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    const size_t dash = item.rfind('-');
    const auto first =
        dash == std::string::npos ? std::nullopt : type_and_index(item.substr(0, dash));
    const auto last =
        first ? type_and_index(first->first + ":" + item.substr(dash + 1)) : std::nullopt;
    if (!last) {
      members.push_back(item);
      continue;
    }
    DIST_CHECK_ARG(last->second >= first->second && last->second - first->second < 10000000,
                   "the member range '", item,
                   "' runs backwards or names more than 10 million tasks");
    for (int64_t index = first->second; index <= last->second; ++index)
      members.push_back(first->first + ":" + std::to_string(index));
  }
  return members;
}

}  // namespace dist::collective
