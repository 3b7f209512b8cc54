// The one check of a path the library or dist-train is about to write a file to. Every file is
// written to a temporary name and renamed over its path (atomic_file.h in src/core), and a
// rename replaces whatever is there: a device node, a FIFO, a socket, a symbolic link, a
// read-only file. A probe once replaced the system's /dev/null that way. So before anything is
// written (and, in dist-train, before anything trains) the target is looked at without following
// it:
//   - missing: fine, it is created;
//   - a regular file the owner may write: fine, it is replaced;
//   - a symbolic link to such a file: the file it points at is replaced and the link is kept
//     (as a shell's `>` would write through it);
//   - anything else (a directory, a device node, a FIFO, a socket, a link to one of them or to
//     nothing, a read-only file): refused, naming what is there.
#pragma once

#include <string>

namespace dist {

// Why a new regular file cannot replace whatever is at `path`, as a phrase ("is a character
// device", "is a symbolic link to a FIFO (named pipe)", "is read-only"); "" when it can. Asks the
// real file system; never throws. Readers use it too, to name what a path that is not a regular
// file holds ("'x.tfrecord' is not a regular file but a FIFO (named pipe)").
std::string why_not_an_output_file(const std::string& path);

// The path a write to `path` must rename onto: `path` itself, or, for a symbolic link to a
// writable regular file, the file it points at. Throws InvalidArgument "<what> '<path>' <why>;
// choose another path" when why_not_an_output_file says it cannot be written.
std::string output_file_target(const std::string& path, const std::string& what);

}  // namespace dist
