#include "core/path_match.h"

#include <fnmatch.h>

#include <algorithm>

#include "dist/core/error.h"

namespace dist::detail {
namespace {

// Whether a part of the pattern has an unescaped *, ? or [.
bool has_wildcard(const std::string& part) {
  for (size_t i = 0; i < part.size(); ++i) {
    if (part[i] == '\\') {
      ++i;
    } else if (part[i] == '*' || part[i] == '?' || part[i] == '[') {
      return true;
    }
  }
  return false;
}

// A written part with its escapes removed: "a\*b" names the file "a*b".
std::string unescaped(const std::string& part) {
  std::string out;
  for (size_t i = 0; i < part.size(); ++i) {
    if (part[i] == '\\' && i + 1 < part.size()) ++i;
    out.push_back(part[i]);
  }
  return out;
}

std::string joined(const std::string& base, const std::string& name) {
  if (base.empty()) return name;
  return base.back() == '/' ? base + name : base + "/" + name;
}

// The entries of `base` (the working directory when "") that `part` matches, as paths.
void add_listed(Env* env, const std::string& base, const std::string& part,
                const std::string& pattern, std::vector<std::string>& out) {
  const std::string dir = base.empty() ? "." : base;
  std::vector<std::string> names;
  try {
    if (env->file_info(dir).kind != FileKind::kDirectory) return;  // nothing below it
    names = env->get_children(dir);
  } catch (const DataError& e) {
    throw DataError(concat("cannot list the files matching '", pattern,
                           "': a directory on the way cannot be read: ", e.what()));
  }
  std::sort(names.begin(), names.end());
  for (const auto& name : names)
    if (::fnmatch(part.c_str(), name.c_str(), FNM_PERIOD) == 0) out.push_back(joined(base, name));
}

}  // namespace

std::vector<std::string> match_paths(Env* env, const std::string& pattern) {
  std::vector<std::string> paths = {pattern.rfind('/', 0) == 0 ? "/" : ""};
  bool last_written = true;  // whether the last part was taken as written (not listed)
  size_t start = 0;
  while (start <= pattern.size()) {
    const size_t slash = std::min(pattern.find('/', start), pattern.size());
    const std::string part = pattern.substr(start, slash - start);
    start = slash + 1;
    if (part.empty()) continue;
    std::vector<std::string> next;
    last_written = !has_wildcard(part);
    for (const auto& base : paths) {
      if (last_written) {
        next.push_back(joined(base, unescaped(part)));
      } else {
        add_listed(env, base, part, pattern, next);
      }
    }
    paths = std::move(next);
  }
  if (last_written) {
    paths.erase(std::remove_if(paths.begin(), paths.end(),
                               [env](const std::string& p) { return !env->file_exists(p); }),
                paths.end());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace dist::detail
