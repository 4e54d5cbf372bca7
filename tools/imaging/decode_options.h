// kiln::DecodeOptions: the options of the converter's decode stage (DecodeImage,
// tools/imaging/image_decoder.h), in a header of their own without OpenCV so that option
// structs elsewhere (tools/pack/pack_options.h) can hold them without pulling in OpenCV.
// Thread safety: plain data.
#ifndef KILN_TOOLS_IMAGING_DECODE_OPTIONS_H_
#define KILN_TOOLS_IMAGING_DECODE_OPTIONS_H_

#include <cstdint>

namespace kiln {

struct DecodeOptions {
  // Channels of the decoded image: 1 (grey) or 3 (RGB). Default: 3.
  uint32_t channels = 3;
  // Refuses images with more pixels (width * height) than this. 0 means no kiln limit (OpenCV's
  // 2^30 still applies to decoding). Default: 178956970, twice Pillow's bomb-warning limit.
  uint64_t max_pixels = 178956970;
  // Grey level (0..255) that alpha is composited over. Default: 255 (white).
  uint8_t background = 255;
  // Shrink-on-load (tools/imaging/decode_policy.md, "Shrink on load"): when both are > 0, a 1- or
  // 3-component JPEG is decoded at the smallest of libjpeg-turbo's IDCT scales 1/8, 1/4, 1/2
  // whose upright result is still at least min_width x min_height pixels (DecodeJpeg); other
  // formats, and CMYK / YCCK JPEGs, are decoded at full size. The converter sets them to twice
  // the resize target (tools/imaging/shrink_on_load.h); `kiln pack --exact-decode` leaves them 0.
  // Default: 0 and 0, every image at full size.
  uint32_t min_width = 0;
  uint32_t min_height = 0;
};

}  // namespace kiln

#endif  // KILN_TOOLS_IMAGING_DECODE_OPTIONS_H_
