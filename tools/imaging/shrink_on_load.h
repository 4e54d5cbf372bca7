// kiln::ShrinkOnLoad: the converter's choice of a reduced JPEG decode ("shrink on load").
//
// Packing camera photos or wallpapers (1-20 MP) to 224 x 224 spends almost all of its time
// decoding pixels that the resize then averages away. libjpeg-turbo can instead decode at 1/2,
// 1/4 or 1/8 scale inside the IDCT (scale_num / scale_denom), as image servers do. The rule
// (tools/imaging/decode_policy.md, "Shrink on load"):
//
//   A JPEG is decoded at the largest reduction 1/d (d = 8, 4, 2) that keeps the decoded image at
//   least twice the resize target on BOTH sides, where the resize target is Preprocess's
//   ResizedSize of the image's upright full size (so after EXIF orientation, and before the
//   centre crop); then Preprocess resizes it, with the same area filter, to that same target.
//
// So the area filter always averages at least 2 x 2 decoded pixels per output pixel, the
// output's geometry (resize target, crop window) is the full decode's, and only the pixel
// values differ, by the amounts decode_policy.md measures on real photos. `kiln pack
// --exact-decode` (PackOptions::exact_decode) turns the rule off: every image is decoded at full
// size, giving the bytes of kiln before shrink-on-load existed.
//
// Thread safety: both functions are reentrant.
#ifndef KILN_TOOLS_IMAGING_SHRINK_ON_LOAD_H_
#define KILN_TOOLS_IMAGING_SHRINK_ON_LOAD_H_

#include <cstdint>
#include <opencv2/core.hpp>
#include <string_view>

#include "tools/imaging/image_decoder.h"
#include "tools/imaging/preprocessor.h"

namespace kiln {

// Returns the smallest decoded size (width, height, upright pixels) that the rule allows for an
// image whose upright full size is `width` x `height`: twice ResizedSize on each axis. Returns
// an empty size (0 x 0: no reduction) when ResizedSize refuses the image (Preprocess will refuse
// it with the same message) or when twice the target does not fit 32 bits.
// Example: 5120 x 2880 to a 224 x 224 centre crop: the target is 398 x 224, so the minimum is
// 796 x 448, and JpegScaleDenominator picks 1/4 (1280 x 720).
cv::Size ShrinkOnLoadMinimum(uint64_t width, uint64_t height, const PreprocessOptions& preprocess);

// Returns `decode` with min_width / min_height (tools/imaging/image_decoder.h) set by the rule for
// the image `bytes`, when they are a JPEG whose header parses and that one of the reductions fits;
// otherwise `decode` unchanged (every other format, damaged headers: DecodeImage reports those).
// Reads the header (tools/imaging/image_header.h) and, only when a reduction is possible, the EXIF
// orientation; decodes no pixels.
DecodeOptions ShrinkOnLoadDecodeOptions(std::string_view bytes, const DecodeOptions& decode,
                                        const PreprocessOptions& preprocess);

}  // namespace kiln

#endif  // KILN_TOOLS_IMAGING_SHRINK_ON_LOAD_H_
