// An independent PNG decoder for the tests, written from the PNG specification (not libpng):
// the signature, every chunk's CRC-32 (zlib's crc32), IHDR, the IDAT stream inflated with
// zlib, and the five per-row filters undone. Only what the library writes is supported: 8-bit
// grey, RGB and RGBA (colour types 0, 2, 6), not interlaced.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace dist::testing {

struct DecodedPng {
  uint32_t width = 0, height = 0;
  int bit_depth = 0, color_type = 0, interlace = 0;
  std::vector<std::string> chunk_types;  // in file order
  std::vector<uint8_t> pixels;           // rows top to bottom, each width * channels() bytes
  int channels() const { return color_type == 0 ? 1 : color_type == 2 ? 3 : 4; }
};

inline uint32_t read_be32(const std::string& bytes, size_t at) {
  return static_cast<uint32_t>(static_cast<uint8_t>(bytes[at])) << 24 |
         static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 1])) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 2])) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 3]));
}

// The predictor of filter type 4.
inline int paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return a;
  return pb <= pc ? b : c;
}

// Undoes each row's filter into png.pixels; returns what went wrong ("" when nothing did).
inline std::string unfilter_rows(const std::vector<uint8_t>& filtered, size_t bpp, size_t stride,
                                 DecodedPng& png) {
  png.pixels.assign(png.height * stride, 0);
  for (size_t y = 0; y < png.height; ++y) {
    const uint8_t filter = filtered[y * (1 + stride)];
    const uint8_t* in = &filtered[y * (1 + stride) + 1];
    uint8_t* row = &png.pixels[y * stride];
    const uint8_t* up = y > 0 ? &png.pixels[(y - 1) * stride] : nullptr;
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= bpp ? row[i - bpp] : 0;
      const int b = up ? up[i] : 0;
      const int c = up && i >= bpp ? up[i - bpp] : 0;
      int predictor;
      switch (filter) {
        case 0:
          predictor = 0;
          break;
        case 1:
          predictor = a;
          break;
        case 2:
          predictor = b;
          break;
        case 3:
          predictor = (a + b) / 2;
          break;
        case 4:
          predictor = paeth(a, b, c);
          break;
        default:
          return "unknown filter type " + std::to_string(filter);
      }
      row[i] = static_cast<uint8_t>(in[i] + predictor);
    }
  }
  return "";
}

// Decodes `bytes`; on a problem returns what was decoded so far and sets `error`.
inline DecodedPng decode_png(const std::string& bytes, std::string* error) {
  DecodedPng png;
  auto fail = [&](const std::string& why) {
    *error = why;
    return png;
  };
  static const std::string kSignature("\x89PNG\r\n\x1a\n", 8);
  if (bytes.compare(0, 8, kSignature) != 0) return fail("no PNG signature");
  std::string idat;
  bool ended = false;
  for (size_t at = 8; !ended;) {
    if (at + 12 > bytes.size()) return fail("truncated chunk header at byte " + std::to_string(at));
    const uint32_t length = read_be32(bytes, at);
    if (at + 12 + length > bytes.size())
      return fail("truncated chunk at byte " + std::to_string(at));
    const std::string type = bytes.substr(at + 4, 4);
    const std::string data = bytes.substr(at + 8, length);
    // The CRC covers the type and the data, not the length.
    uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(type.data()), 4);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(length));
    if (crc != read_be32(bytes, at + 8 + length)) return fail("bad CRC in chunk " + type);
    png.chunk_types.push_back(type);
    if (png.chunk_types.size() == 1 && type != "IHDR") return fail("the first chunk is " + type);
    if (type == "IHDR") {
      if (length != 13) return fail("IHDR of " + std::to_string(length) + " bytes");
      png.width = read_be32(data, 0);
      png.height = read_be32(data, 4);
      png.bit_depth = static_cast<uint8_t>(data[8]);
      png.color_type = static_cast<uint8_t>(data[9]);
      if (data[10] != 0 || data[11] != 0) return fail("unknown compression or filter method");
      png.interlace = static_cast<uint8_t>(data[12]);
    } else if (type == "IDAT") {
      idat += data;
    } else if (type == "IEND") {
      ended = true;
      if (at + 12 != bytes.size()) return fail("bytes after IEND");
    }
    at += 12 + length;
  }
  if (png.bit_depth != 8 || png.interlace != 0 ||
      (png.color_type != 0 && png.color_type != 2 && png.color_type != 6))
    return fail("unsupported here: bit depth " + std::to_string(png.bit_depth) + ", colour type " +
                std::to_string(png.color_type) + ", interlace " + std::to_string(png.interlace));

  const size_t bpp = static_cast<size_t>(png.channels());
  const size_t stride = png.width * bpp;
  // Each row is a filter-type byte and its filtered bytes.
  uLongf inflated_size = static_cast<uLongf>(png.height * (1 + stride));
  std::vector<uint8_t> filtered(inflated_size);
  if (uncompress(filtered.data(), &inflated_size, reinterpret_cast<const Bytef*>(idat.data()),
                 static_cast<uLong>(idat.size())) != Z_OK ||
      inflated_size != filtered.size())
    return fail("IDAT does not inflate to " + std::to_string(filtered.size()) + " bytes");

  const std::string unfiltered = unfilter_rows(filtered, bpp, stride, png);
  if (!unfiltered.empty()) return fail(unfiltered);
  return png;
}

}  // namespace dist::testing
