// kiln::PeekImageSize: reads the pixel size an encoded image claims, from its header alone,
// without decoding or allocating anything in proportion to that size.
//
// The converter calls it before the decoder so that a decompression bomb (a small file whose
// header claims billions of pixels) is refused before OpenCV allocates the pixel buffer, and a
// header cut short or malformed is refused with kiln's words, not OpenCV's. PNG (IHDR chunk),
// JPEG (SOFn marker), BMP (DIB header), TIFF (IFD0), WebP (VP8 / VP8L / VP8X) and PNM (P1..P7)
// are parsed; every other format answers NotSupported and relies on OpenCV's own limits (see
// tools/imaging/decode_policy.md).
//
// Thread safety: pure functions of their arguments; callable from any thread.
#ifndef KILN_TOOLS_IMAGING_IMAGE_HEADER_H_
#define KILN_TOOLS_IMAGING_IMAGE_HEADER_H_

#include <cstdint>
#include <string_view>

#include "formats/status.h"

namespace kiln {

// Encoded image formats recognised by their first bytes (magic numbers).
enum class ImageFormat {
  kUnknown = 0,  // No magic number kiln knows: probably not an image.
  kJpeg,         // FF D8 FF.
  kPng,          // 89 50 4E 47 0D 0A 1A 0A.
  kBmp,          // "BM".
  kGif,          // "GIF87a" / "GIF89a".
  kTiff,         // "II*\0" or "MM\0*".
  kWebp,         // "RIFF" <4 bytes> "WEBP".
  kPnm,          // "P1".."P7" (PBM, PGM, PPM, PAM).
  kFloat,        // Floating-point samples only: PFM ("PF", "Pf"), OpenEXR, Radiance HDR.
  kOther,        // Other formats OpenCV may read: JPEG 2000, Sun raster.
};

// Returns the format whose magic number starts `bytes`, or kUnknown. Never fails.
ImageFormat SniffImageFormat(std::string_view bytes);

// Returns a short lower-case name: "jpeg", "png", ..., "unknown".
std::string_view ImageFormatName(ImageFormat format);

// What an image header claims. Sizes are in pixels.
struct ImageSize {
  ImageFormat format = ImageFormat::kUnknown;  // kPng, kJpeg, kBmp, kTiff, kWebp or kPnm.
  uint32_t width = 0;                          // Columns, >= 1.
  uint32_t height = 0;                         // Rows, >= 1.

  // PNG only: the sum of the payload sizes of the IDAT chunks present in `bytes` (compressed
  // pixel data, in bytes), and the size in bytes that this data must inflate to for the size
  // and pixel format in IHDR (filter bytes included, all Adam7 passes when interlaced). Deflate
  // cannot expand data by more than about 1032:1, so png_inflated_bytes much larger than
  // 1032 * png_idat_bytes proves the file truncated or invalid without decoding it.
  uint64_t png_idat_bytes = 0;
  uint64_t png_inflated_bytes = 0;

  // JPEG only: true when an end-of-image marker (FF D9) follows the first start-of-scan marker.
  // A JPEG without one was cut short (libjpeg would fill the missing rows with grey).
  bool jpeg_has_end_marker = false;

  // Returns width * height.
  uint64_t pixels() const { return uint64_t{width} * height; }
};

// Parses the header of the image held in `bytes`: the width and height, and for PNG and JPEG
// the fields above. Reads only headers and chunk / marker / IFD entry lengths (no CRC check,
// no inflate, no Huffman decode); time is linear in the number of chunks, markers or IFD0
// entries, memory is constant. Where the size is found:
//   PNG   IHDR (PNG specification, 11.2.2).     JPEG  the first SOFn marker.
//   BMP   the DIB header at offset 14: 16-bit sizes in a 12-byte BITMAPCOREHEADER, signed
//         32-bit ones otherwise (a negative height, rows stored top-down, counts as its
//         absolute value).
//   TIFF  IFD0's ImageWidth (256) and ImageLength (257) tags, BYTE, SHORT or LONG (TIFF 6.0).
//   WebP  the first chunk: VP8 frame header, VP8L header or VP8X canvas (RFC 9649).
//   PNM   the ASCII width and height after "P1".."P6" (whitespace and '#' comments between),
//         or the WIDTH and HEIGHT lines of a PAM ("P7") header.
// Errors:
//   NotSupported  `bytes` is none of these formats, a JPEG whose height is set by a DNL marker,
//                 or a TIFF size tag of another type (the caller falls back to decoding).
//   Corruption    a header cut short or malformed: a zero width or height in any format; no
//                 IHDR first, an unknown colour type / bit depth pair; no SOFn before the first
//                 SOS, a marker length running past the end; a BMP DIB header size under 12;
//                 a TIFF IFD0 past the end or without a size tag; a WebP first chunk that is
//                 not VP8 / VP8L / VP8X or lacks its start code; a PNM size that is not a
//                 decimal number or is over 2^32 - 1. The message says what and at which byte
//                 offset, but not the file name (the caller adds it).
Result<ImageSize> PeekImageSize(std::string_view bytes);

// Returns true when the BMP `bytes` declares an alpha channel: 32 bits per pixel and a non-zero
// alpha mask, which only a BITMAPV3/V4/V5 header with BI_BITFIELDS, or any header with
// BI_ALPHABITFIELDS, can hold. False for a plain 40-byte BITMAPINFOHEADER (with or without
// BI_BITFIELDS red, green and blue masks), a BITMAPV2INFOHEADER (RGB masks only), BI_RGB
// whatever the header, other depths, and anything that is not a BMP or is too short to say.
// Then the fourth byte of each pixel is padding, usually 0, and must not be taken for alpha.
bool BmpDeclaresAlpha(std::string_view bytes);

}  // namespace kiln

#endif  // KILN_TOOLS_IMAGING_IMAGE_HEADER_H_
