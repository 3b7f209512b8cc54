#include "dist/core/printable.h"

#include <algorithm>

namespace dist {

std::string printable(std::string_view bytes, size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  const size_t shown = std::min(bytes.size(), max_bytes);
  for (size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (shown < bytes.size()) out += "... (" + std::to_string(bytes.size()) + " bytes in all)";
  return out;
}

}  // namespace dist
