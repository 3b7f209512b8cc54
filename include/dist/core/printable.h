// Bytes read from a file, made safe to put in a message. A message that names what a file holds
// (a feature's name, a file name in a folder, a header's text) must never carry control
// characters to a terminal, nor hundreds of kilobytes of a hostile record to stderr.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dist {

// Printable ASCII kept, every other byte (and the backslash) as \xNN, at most `max_bytes` of
// the input shown and the rest said by its length: printable("a\nb") == "a\x0ab";
// printable(395 KB) == "<first 64 bytes>... (404480 bytes in all)".
std::string printable(std::string_view bytes, size_t max_bytes = 64);

}  // namespace dist
