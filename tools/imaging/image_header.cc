#include "tools/imaging/image_header.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace kiln {
namespace {

constexpr char kPngMagic[] = "\x89PNG\r\n\x1a\n";

bool StartsWith(std::string_view bytes, std::string_view prefix) {
  return bytes.size() >= prefix.size() && bytes.substr(0, prefix.size()) == prefix;
}

uint32_t ReadBe32(std::string_view bytes, size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + pos);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

uint32_t ReadBe16(std::string_view bytes, size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + pos);
  return (uint32_t{p[0]} << 8) | p[1];
}

uint32_t ReadLe32(std::string_view bytes, size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + pos);
  return (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[1]} << 8) | p[0];
}

unsigned char At(std::string_view bytes, size_t pos) {
  return static_cast<unsigned char>(bytes[pos]);
}

// Returns the bits per pixel of a PNG colour type / bit depth pair, or 0 if the pair is invalid
// (PNG specification, table 11.1).
uint32_t PngBitsPerPixel(uint32_t color_type, uint32_t bit_depth) {
  auto depth_in = [bit_depth](std::initializer_list<uint32_t> allowed) {
    for (uint32_t d : allowed) {
      if (d == bit_depth) return true;
    }
    return false;
  };
  switch (color_type) {
    case 0:
      return depth_in({1, 2, 4, 8, 16}) ? bit_depth : 0;  // Grey.
    case 2:
      return depth_in({8, 16}) ? 3 * bit_depth : 0;  // RGB.
    case 3:
      return depth_in({1, 2, 4, 8}) ? bit_depth : 0;  // Palette.
    case 4:
      return depth_in({8, 16}) ? 2 * bit_depth : 0;  // Grey + alpha.
    case 6:
      return depth_in({8, 16}) ? 4 * bit_depth : 0;  // RGBA.
    default:
      return 0;
  }
}

// Bytes of one filtered scanline group: rows * (1 filter byte + packed pixel bytes).
uint64_t PngPassBytes(uint64_t width, uint64_t height, uint32_t bits_per_pixel) {
  if (width == 0 || height == 0) return 0;
  return height * (1 + (width * bits_per_pixel + 7) / 8);
}

Result<ImageSize> PeekPng(std::string_view bytes) {
  // Signature (8) + IHDR length (4) + type (4) + 13 bytes of data.
  if (bytes.size() < 8 + 8 + 13) {
    return Status::Corruption("PNG header cut short: " + std::to_string(bytes.size()) + " bytes");
  }
  if (ReadBe32(bytes, 8) != 13 || bytes.substr(12, 4) != "IHDR") {
    return Status::Corruption("PNG does not start with a 13-byte IHDR chunk at offset 8");
  }
  ImageSize size;
  size.format = ImageFormat::kPng;
  size.width = ReadBe32(bytes, 16);
  size.height = ReadBe32(bytes, 20);
  const uint32_t bit_depth = At(bytes, 24);
  const uint32_t color_type = At(bytes, 25);
  const uint32_t interlace = At(bytes, 28);
  // The PNG specification caps both dimensions at 2^31 - 1.
  if (size.width == 0 || size.height == 0 || size.width > 0x7fffffffu ||
      size.height > 0x7fffffffu) {
    return Status::Corruption("PNG IHDR has an invalid size " + std::to_string(size.width) + " x " +
                              std::to_string(size.height));
  }
  const uint32_t bpp = PngBitsPerPixel(color_type, bit_depth);
  if (bpp == 0 || interlace > 1) {
    return Status::Corruption("PNG IHDR has an invalid colour type " + std::to_string(color_type) +
                              " / bit depth " + std::to_string(bit_depth) + " / interlace " +
                              std::to_string(interlace));
  }
  const uint64_t w = size.width;
  const uint64_t h = size.height;
  if (interlace == 0) {
    size.png_inflated_bytes = PngPassBytes(w, h, bpp);
  } else {
    // Adam7: (x start, y start, x step, y step) of the seven passes.
    static constexpr uint32_t kPasses[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8},
                                               {2, 0, 4, 4}, {0, 2, 2, 4}, {1, 0, 2, 2},
                                               {0, 1, 1, 2}};
    for (const auto& p : kPasses) {
      const uint64_t pw = w > p[0] ? (w - p[0] + p[2] - 1) / p[2] : 0;
      const uint64_t ph = h > p[1] ? (h - p[1] + p[3] - 1) / p[3] : 0;
      size.png_inflated_bytes += PngPassBytes(pw, ph, bpp);
    }
  }
  // Walk the chunks (length, type, data, CRC) and add up the IDAT payloads that are present.
  // A chunk that runs past the end counts only for the bytes that exist.
  size_t pos = 8;
  while (pos + 8 <= bytes.size()) {
    const uint64_t length = ReadBe32(bytes, pos);
    const std::string_view type = bytes.substr(pos + 4, 4);
    const uint64_t available = bytes.size() - (pos + 8);
    if (type == "IDAT") size.png_idat_bytes += length < available ? length : available;
    if (type == "IEND" || length + 4 > available) break;
    pos += 8 + length + 4;
  }
  return size;
}

Result<ImageSize> PeekJpeg(std::string_view bytes) {
  ImageSize size;
  size.format = ImageFormat::kJpeg;
  bool have_sof = false;
  size_t pos = 2;  // After SOI (FF D8).
  while (true) {
    if (pos >= bytes.size()) {
      return Status::Corruption("JPEG ends at offset " + std::to_string(pos) +
                                " before its start-of-scan marker");
    }
    if (At(bytes, pos) != 0xFF) {
      return Status::Corruption("JPEG has no marker at offset " + std::to_string(pos));
    }
    while (pos < bytes.size() && At(bytes, pos) == 0xFF) ++pos;  // Fill bytes.
    if (pos >= bytes.size()) continue;                           // Reported above.
    const unsigned marker = At(bytes, pos);
    const size_t marker_offset = pos - 1;
    ++pos;
    // Markers without a length field: TEM, RSTn, SOI.
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) continue;
    if (marker == 0xD9 || marker == 0x00) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      const std::string name = {kHex[marker >> 4], kHex[marker & 15]};
      return Status::Corruption("JPEG has marker FF " + name + " at offset " +
                                std::to_string(marker_offset) + " before its start of scan");
    }
    if (pos + 2 > bytes.size()) {
      return Status::Corruption("JPEG segment length cut short at offset " + std::to_string(pos));
    }
    const uint32_t length = ReadBe16(bytes, pos);  // Includes its own two bytes.
    if (length < 2 || pos + length > bytes.size()) {
      return Status::Corruption("JPEG segment at offset " + std::to_string(marker_offset) +
                                " has length " + std::to_string(length) + " past the end");
    }
    // SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC).
    const bool is_sof =
        marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (is_sof && !have_sof) {
      if (length < 8) {
        return Status::Corruption("JPEG frame header at offset " + std::to_string(marker_offset) +
                                  " is too short");
      }
      size.height = ReadBe16(bytes, pos + 3);
      size.width = ReadBe16(bytes, pos + 5);
      if (size.height == 0) {
        // The height then comes from a DNL marker after the first scan; rare, left to OpenCV.
        return Status::NotSupported("JPEG height is defined by a DNL marker");
      }
      if (size.width == 0) {
        return Status::Corruption("JPEG frame header at offset " + std::to_string(marker_offset) +
                                  " has width 0");
      }
      have_sof = true;
    }
    if (marker == 0xDA) {  // SOS: entropy-coded data follows.
      if (!have_sof) {
        return Status::Corruption("JPEG start of scan at offset " + std::to_string(marker_offset) +
                                  " before any frame header");
      }
      // FF D9 cannot occur inside entropy-coded data (FF is stuffed as FF 00 there), so an
      // FF D9 anywhere after the first SOS is an end-of-image marker. Search from the end:
      // files often carry a few bytes of trailing junk, rarely much.
      const size_t scan_start = pos + length;
      for (size_t i = bytes.size(); i >= scan_start + 2; --i) {
        if (At(bytes, i - 2) == 0xFF && At(bytes, i - 1) == 0xD9) {
          size.jpeg_has_end_marker = true;
          break;
        }
      }
      return size;
    }
    pos += length;
  }
}

uint32_t ReadLe16(std::string_view bytes, size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + pos);
  return (uint32_t{p[1]} << 8) | p[0];
}

Status ZeroSize(std::string_view format, uint32_t width, uint32_t height) {
  return Status::Corruption(std::string(format) + " header claims a size of " +
                            std::to_string(width) + " x " + std::to_string(height));
}

Status CutShort(std::string_view format, std::string_view what, size_t size) {
  return Status::Corruption(std::string(format) + " header cut short: " + std::to_string(size) +
                            " bytes, too few for " + std::string(what));
}

// BITMAPFILEHEADER (14 bytes), then a DIB header that starts with its own size: 12 for OS/2's
// BITMAPCOREHEADER (16-bit width and height), 16 or more for the others (signed 32-bit width
// and height; a negative height means rows stored top-down).
Result<ImageSize> PeekBmp(std::string_view bytes) {
  if (bytes.size() < 18) return CutShort("BMP", "the DIB header size at offset 14", bytes.size());
  const uint32_t dib_bytes = ReadLe32(bytes, 14);
  ImageSize size;
  size.format = ImageFormat::kBmp;
  if (dib_bytes == 12) {
    if (bytes.size() < 22) return CutShort("BMP", "the size at offset 18", bytes.size());
    size.width = ReadLe16(bytes, 18);
    size.height = ReadLe16(bytes, 20);
  } else if (dib_bytes >= 16) {
    if (bytes.size() < 26) return CutShort("BMP", "the size at offset 18", bytes.size());
    const int64_t width = static_cast<int32_t>(ReadLe32(bytes, 18));
    const int64_t height = static_cast<int32_t>(ReadLe32(bytes, 22));
    if (width < 0) {
      return Status::Corruption("BMP header claims a negative width " + std::to_string(width));
    }
    size.width = static_cast<uint32_t>(width);
    size.height = static_cast<uint32_t>(height < 0 ? -height : height);
  } else {
    return Status::Corruption("BMP DIB header size " + std::to_string(dib_bytes) +
                              " at offset 14 is not 12 or at least 16");
  }
  if (size.width == 0 || size.height == 0) return ZeroSize("BMP", size.width, size.height);
  return size;
}

// TIFF 6.0 (section 2): byte order, 42, the offset of IFD0, whose ImageWidth (256) and
// ImageLength (257) entries hold the size as BYTE, SHORT or LONG values.
Result<ImageSize> PeekTiff(std::string_view bytes) {
  const bool big_endian = bytes[0] == 'M';
  auto u16 = [&](size_t pos) { return big_endian ? ReadBe16(bytes, pos) : ReadLe16(bytes, pos); };
  auto u32 = [&](size_t pos) { return big_endian ? ReadBe32(bytes, pos) : ReadLe32(bytes, pos); };
  if (bytes.size() < 8) return CutShort("TIFF", "the offset of IFD0 at offset 4", bytes.size());
  const uint64_t ifd = u32(4);
  if (ifd + 2 > bytes.size()) {
    return Status::Corruption("TIFF IFD0 offset " + std::to_string(ifd) + " is past the end (" +
                              std::to_string(bytes.size()) + " bytes)");
  }
  const uint32_t entries = u16(ifd);
  if (ifd + 2 + 12 * uint64_t{entries} > bytes.size()) {
    return Status::Corruption("TIFF IFD0 at offset " + std::to_string(ifd) + " has " +
                              std::to_string(entries) + " entries, cut short by the end of file");
  }
  ImageSize size;
  size.format = ImageFormat::kTiff;
  bool have_width = false, have_height = false;
  for (uint32_t i = 0; i < entries; ++i) {
    const size_t entry = ifd + 2 + 12 * size_t{i};
    const uint32_t tag = u16(entry);
    if (tag != 256 && tag != 257) continue;
    const uint32_t type = u16(entry + 2);
    uint32_t value = 0;
    if (type == 1) {  // BYTE
      value = At(bytes, entry + 8);
    } else if (type == 3) {  // SHORT: the first two bytes of the value field.
      value = u16(entry + 8);
    } else if (type == 4) {  // LONG
      value = u32(entry + 8);
    } else {
      return Status::NotSupported("TIFF size tag of type " + std::to_string(type));
    }
    (tag == 256 ? size.width : size.height) = value;
    (tag == 256 ? have_width : have_height) = true;
  }
  if (!have_width || !have_height) {
    return Status::Corruption("TIFF IFD0 at offset " + std::to_string(ifd) + " has no " +
                              (have_width ? "ImageLength (257)" : "ImageWidth (256)") + " tag");
  }
  if (size.width == 0 || size.height == 0) return ZeroSize("TIFF", size.width, size.height);
  return size;
}

// RIFF container (12 bytes), then the first chunk: "VP8 " (lossy: 14-bit sizes after the
// frame tag and start code, RFC 6386 section 9.1), "VP8L" (lossless: 14-bit sizes minus one
// after the 0x2F signature) or "VP8X" (extended: 24-bit canvas sizes minus one at offsets 24
// and 27). WebP Container Specification, RFC 9649.
Result<ImageSize> PeekWebp(std::string_view bytes) {
  if (bytes.size() < 20)
    return CutShort("WebP", "its first chunk header at offset 12", bytes.size());
  const std::string_view chunk = bytes.substr(12, 4);
  ImageSize size;
  size.format = ImageFormat::kWebp;
  if (chunk == "VP8 ") {
    if (bytes.size() < 30)
      return CutShort("WebP", "the VP8 frame header at offset 20", bytes.size());
    if (bytes.substr(23, 3) != "\x9d\x01\x2a") {
      return Status::Corruption("WebP VP8 frame at offset 20 has no start code 9D 01 2A");
    }
    size.width = ReadLe16(bytes, 26) & 0x3fff;
    size.height = ReadLe16(bytes, 28) & 0x3fff;
  } else if (chunk == "VP8L") {
    if (bytes.size() < 25) return CutShort("WebP", "the VP8L header at offset 20", bytes.size());
    if (At(bytes, 20) != 0x2f) {
      return Status::Corruption("WebP VP8L data at offset 20 has no signature byte 2F");
    }
    const uint32_t bits = ReadLe32(bytes, 21);
    size.width = (bits & 0x3fff) + 1;
    size.height = ((bits >> 14) & 0x3fff) + 1;
  } else if (chunk == "VP8X") {
    if (bytes.size() < 30)
      return CutShort("WebP", "the VP8X canvas size at offset 24", bytes.size());
    size.width = (ReadLe32(bytes, 24) & 0xffffff) + 1;
    size.height = (ReadLe32(bytes, 27) & 0xffffff) + 1;
  } else {
    return Status::Corruption("WebP has chunk '" + std::string(chunk) +
                              "' at offset 12 where VP8, VP8L or VP8X should be");
  }
  if (size.width == 0 || size.height == 0) return ZeroSize("WebP", size.width, size.height);
  return size;
}

// Netpbm: "P1".."P6", then width and height as ASCII decimals separated by whitespace and
// '#' comments (netpbm's pbm(5), pgm(5), ppm(5)); PAM ("P7") has "WIDTH n" and "HEIGHT n"
// lines before ENDHDR (pam(5)).
class PnmHeader {
 public:
  explicit PnmHeader(std::string_view bytes) : bytes_(bytes) {}

  // Skips whitespace and comments, then reads one decimal number naming `what`.
  Result<uint32_t> Number(std::string_view what) {
    while (pos_ < bytes_.size()) {
      const char c = bytes_[pos_];
      if (c == '#') {
        while (pos_ < bytes_.size() && bytes_[pos_] != '\n' && bytes_[pos_] != '\r') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
        ++pos_;
      } else {
        break;
      }
    }
    if (pos_ >= bytes_.size()) {
      return Status::Corruption("PNM header ends at offset " + std::to_string(pos_) +
                                " before its " + std::string(what));
    }
    const size_t start = pos_;
    uint64_t value = 0;
    while (pos_ < bytes_.size() && bytes_[pos_] >= '0' && bytes_[pos_] <= '9') {
      value = value * 10 + static_cast<uint64_t>(bytes_[pos_] - '0');
      if (value > 0xffffffffu) {
        return Status::Corruption("PNM " + std::string(what) + " at offset " +
                                  std::to_string(start) + " is over 4294967295");
      }
      ++pos_;
    }
    if (pos_ == start) {
      return Status::Corruption("PNM header has byte 0x" + Hex(bytes_[pos_]) + " at offset " +
                                std::to_string(pos_) + " where its " + std::string(what) +
                                " should be");
    }
    return static_cast<uint32_t>(value);
  }

  // PAM: reads the header lines up to ENDHDR, keeping WIDTH and HEIGHT.
  Result<ImageSize> Pam() {
    ImageSize size;
    size.format = ImageFormat::kPnm;
    bool have_width = false, have_height = false;
    while (true) {
      while (pos_ < bytes_.size() && (bytes_[pos_] == '\n' || bytes_[pos_] == '\r' ||
                                      bytes_[pos_] == ' ' || bytes_[pos_] == '\t')) {
        ++pos_;
      }
      if (pos_ >= bytes_.size()) {
        return Status::Corruption("PAM header ends at offset " + std::to_string(pos_) +
                                  " before ENDHDR");
      }
      const size_t end = std::min(bytes_.find('\n', pos_), bytes_.size());
      const std::string_view line = bytes_.substr(pos_, end - pos_);
      if (line.substr(0, 6) == "ENDHDR") break;
      if (line.substr(0, 6) == "WIDTH " || line.substr(0, 7) == "HEIGHT ") {
        const bool width = line[0] == 'W';
        pos_ += width ? 6 : 7;
        KILN_ASSIGN_OR_RETURN(uint32_t value, Number(width ? "width" : "height"));
        (width ? size.width : size.height) = value;
        (width ? have_width : have_height) = true;
      }
      pos_ = std::max(pos_, end);
    }
    if (!have_width || !have_height) {
      return Status::Corruption(std::string("PAM header has no ") +
                                (have_width ? "HEIGHT" : "WIDTH") + " line before ENDHDR");
    }
    return size;
  }

 private:
  static std::string Hex(char c) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    const auto u = static_cast<unsigned char>(c);
    return {kHex[u >> 4], kHex[u & 15]};
  }

  std::string_view bytes_;
  size_t pos_ = 2;  // After "Pn".
};

Result<ImageSize> PeekPnm(std::string_view bytes) {
  PnmHeader header(bytes);
  ImageSize size;
  size.format = ImageFormat::kPnm;
  if (bytes[1] == '7') {
    KILN_ASSIGN_OR_RETURN(size, header.Pam());
  } else {
    KILN_ASSIGN_OR_RETURN(size.width, header.Number("width"));
    KILN_ASSIGN_OR_RETURN(size.height, header.Number("height"));
  }
  if (size.width == 0 || size.height == 0) return ZeroSize("PNM", size.width, size.height);
  return size;
}

}  // namespace

ImageFormat SniffImageFormat(std::string_view bytes) {
  if (StartsWith(bytes, "\xFF\xD8\xFF")) return ImageFormat::kJpeg;
  if (StartsWith(bytes, std::string_view(kPngMagic, 8))) return ImageFormat::kPng;
  if (StartsWith(bytes, "BM")) return ImageFormat::kBmp;
  if (StartsWith(bytes, "GIF87a") || StartsWith(bytes, "GIF89a")) return ImageFormat::kGif;
  if (StartsWith(bytes, std::string_view("II*\0", 4)) ||
      StartsWith(bytes, std::string_view("MM\0*", 4))) {
    return ImageFormat::kTiff;
  }
  if (bytes.size() >= 12 && StartsWith(bytes, "RIFF") && bytes.substr(8, 4) == "WEBP") {
    return ImageFormat::kWebp;
  }
  if (bytes.size() >= 2 && bytes[0] == 'P' && bytes[1] >= '1' && bytes[1] <= '7') {
    return ImageFormat::kPnm;
  }
  if (StartsWith(bytes, "PF") || StartsWith(bytes, "Pf") ||              // PFM.
      StartsWith(bytes, "\x76\x2F\x31\x01") ||                           // OpenEXR.
      StartsWith(bytes, "#?RADIANCE") || StartsWith(bytes, "#?RGBE")) {  // Radiance HDR.
    return ImageFormat::kFloat;
  }
  if (StartsWith(bytes, std::string_view("\0\0\0\x0CjP  \r\n\x87\n", 12)) ||  // JPEG 2000 (JP2).
      StartsWith(bytes, "\xFF\x4F\xFF\x51") ||                                // JPEG 2000 stream.
      StartsWith(bytes, "\x59\xA6\x6A\x95")) {                                // Sun raster.
    return ImageFormat::kOther;
  }
  return ImageFormat::kUnknown;
}

std::string_view ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "jpeg";
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kBmp:
      return "bmp";
    case ImageFormat::kGif:
      return "gif";
    case ImageFormat::kTiff:
      return "tiff";
    case ImageFormat::kWebp:
      return "webp";
    case ImageFormat::kPnm:
      return "pnm";
    case ImageFormat::kFloat:
      return "float";
    case ImageFormat::kOther:
      return "other";
    case ImageFormat::kUnknown:
      break;
  }
  return "unknown";
}

bool BmpDeclaresAlpha(std::string_view bytes) {
  // BITMAPFILEHEADER is 14 bytes; the DIB header follows with its own size first. Offsets
  // below are from the start of the file (Microsoft's BITMAPV5HEADER documentation).
  constexpr size_t kDib = 14;
  if (!StartsWith(bytes, "BM") || bytes.size() < kDib + 20) return false;
  const uint32_t header_bytes = ReadLe32(bytes, kDib);
  const uint32_t bits_per_pixel = At(bytes, kDib + 14) | (uint32_t{At(bytes, kDib + 15)} << 8);
  const uint32_t compression = ReadLe32(bytes, kDib + 16);
  if (header_bytes < 40 || bits_per_pixel != 32) return false;
  constexpr uint32_t kBitfields = 3, kAlphaBitfields = 6;
  // The alpha mask follows the red, green and blue masks at file offset 66: inside a V3 (56),
  // V4 (108) or V5 (124) header, or after a 40-byte header with BI_ALPHABITFIELDS. A 40-byte
  // header with BI_BITFIELDS has three masks after it, a V2 (52) header three inside: no alpha.
  const bool has_alpha_mask = (compression == kBitfields && header_bytes >= 56) ||
                              (compression == kAlphaBitfields && header_bytes >= 40);
  if (!has_alpha_mask || bytes.size() < 70) return false;
  return ReadLe32(bytes, 66) != 0;
}

Result<ImageSize> PeekImageSize(std::string_view bytes) {
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kPng:
      return PeekPng(bytes);
    case ImageFormat::kJpeg:
      return PeekJpeg(bytes);
    case ImageFormat::kBmp:
      return PeekBmp(bytes);
    case ImageFormat::kTiff:
      return PeekTiff(bytes);
    case ImageFormat::kWebp:
      return PeekWebp(bytes);
    case ImageFormat::kPnm:
      return PeekPnm(bytes);
    default:
      return Status::NotSupported("only PNG, JPEG, BMP, TIFF, WebP and PNM headers are parsed");
  }
}

}  // namespace kiln
