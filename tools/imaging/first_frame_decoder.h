// kiln::DecodeGifFirstFrame and kiln::DecodeAnimatedWebpFirstFrame: the converter's decoders for
// the formats that Debian's OpenCV 4.6 cannot read: GIF (it has no GIF reader) and animated WebP
// (its WebP reader refuses animations). They return the first frame, as Pillow's
// `Image.open(f)` (frame 0) and torchvision's ImageFolder show it, for DecodeImage to normalise
// (tools/imaging/image_decoder.h, policy step 2).
//
// GIF (giflib): the first image of the file on a canvas of the logical screen's size. Canvas
// pixels outside that image, and pixels of the Graphics Control Extension's transparent index,
// are transparent (alpha 0); the others are opaque, coloured from the image's local colour
// table, else the global one. Interlaced images are de-interlaced.
// Animated WebP (libwebp's demuxer, WebPAnimDecoder): the first frame composited onto the
// canvas as the WebP container specification says.
//
// Thread safety: both are reentrant.
#ifndef KILN_TOOLS_IMAGING_FIRST_FRAME_DECODER_H_
#define KILN_TOOLS_IMAGING_FIRST_FRAME_DECODER_H_

#include <cstdint>
#include <opencv2/core.hpp>
#include <string>
#include <string_view>

#include "formats/status.h"

namespace kiln {

// Decodes the first frame of the GIF `bytes` into a new continuous CV_8UC4 image in B, G, R, A
// order (OpenCV's), of the logical screen's size. `path` names the file in errors: their
// message starts with "<path>: ", their location().file is `path` and their reason() is the
// message after it (an empty `path`: the bare reason, no location).
// Errors:
//   InvalidArgument  the screen has more than `max_pixels` pixels (0: no limit), checked before
//                    any pixel memory is allocated ("W x H = P pixels exceeds the limit of L
//                    (raise --max-pixels)").
//   Corruption       "truncated or invalid (giflib: <its message>)": a damaged header, a
//                    missing colour table, image data cut short, no image at all.
Result<cv::Mat> DecodeGifFirstFrame(std::string_view bytes, const std::string& path,
                                    uint64_t max_pixels);

// Returns true when `bytes` is a WebP file with the animation flag set (VP8X header).
bool IsAnimatedWebp(std::string_view bytes);

// Decodes the first frame of the animated WebP `bytes` into a new continuous CV_8UC4 image in
// B, G, R, A order, of the canvas's size. Errors as DecodeGifFirstFrame's, with "(libwebp:
// ...)" in the Corruption message.
Result<cv::Mat> DecodeAnimatedWebpFirstFrame(std::string_view bytes, const std::string& path,
                                             uint64_t max_pixels);

}  // namespace kiln

#endif  // KILN_TOOLS_IMAGING_FIRST_FRAME_DECODER_H_
