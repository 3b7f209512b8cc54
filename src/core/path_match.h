// File patterns matched through an Env (env.h), so that a test's Env sees (and can fail) the
// listing as it sees the reading.
#pragma once

#include <string>
#include <vector>

#include "dist/core/env.h"

namespace dist::detail {

// The paths matching `pattern` as POSIX glob(3) finds them: the pattern split at '/', each part
// with *, ? or [...] matched (fnmatch(3)) against the entries of the directories reached so far
// (a leading '.' only by a part that starts with '.'), the other parts taken as written (a
// backslash escapes the next character). Sorted; empty when nothing matches. A path made only
// of written parts is kept if it exists; one found in a listing is kept as listed (whoever
// reads it next finds out if it vanished since). Throws DataError naming the directory and
// the pattern when a directory on the way exists but cannot be listed.
std::vector<std::string> match_paths(Env* env, const std::string& pattern);

}  // namespace dist::detail
