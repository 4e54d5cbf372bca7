#include "tools/imaging/first_frame_decoder.h"

#include <gif_lib.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace kiln {
namespace {

std::string TooLarge(uint64_t width, uint64_t height, uint64_t max_pixels) {
  return std::to_string(width) + " x " + std::to_string(height) + " = " +
         std::to_string(width * height) + " pixels exceeds the limit of " +
         std::to_string(max_pixels) + " (raise --max-pixels)";
}

// giflib reads through this callback; the cursor lives in GifFileType::UserData.
struct GifSource {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

int ReadGif(GifFileType* gif, GifByteType* out, int length) {
  GifSource* src = static_cast<GifSource*>(gif->UserData);
  const size_t n = std::min(static_cast<size_t>(std::max(length, 0)), src->size - src->pos);
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
  return static_cast<int>(n);
}

struct GifCloser {
  void operator()(GifFileType* gif) const {
    int error = 0;
    DGifCloseFile(gif, &error);
  }
};

// DecodeGifFirstFrame without the file name: its messages are the bare reasons.
Result<cv::Mat> GifFirstFrame(std::string_view bytes, uint64_t max_pixels) {
  auto invalid = [&](const std::string& why) {
    return Status::Corruption("truncated or invalid (giflib: " + why + ")");
  };
  GifSource src{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 0};
  int error = 0;
  std::unique_ptr<GifFileType, GifCloser> gif(DGifOpen(&src, ReadGif, &error));
  if (gif == nullptr) return invalid(GifErrorString(error));
  auto last_error = [&] {
    const char* text = GifErrorString(gif->Error);
    return std::string(text != nullptr ? text : "unknown error");
  };
  const uint64_t width = static_cast<uint64_t>(std::max(gif->SWidth, 0));
  const uint64_t height = static_cast<uint64_t>(std::max(gif->SHeight, 0));
  if (width == 0 || height == 0) return invalid("logical screen of zero size");
  if (max_pixels != 0 && width * height > max_pixels) {
    return Status::InvalidArgument(TooLarge(width, height, max_pixels));
  }
  int transparent = NO_TRANSPARENT_COLOR;
  while (true) {
    GifRecordType type;
    if (DGifGetRecordType(gif.get(), &type) == GIF_ERROR) return invalid(last_error());
    if (type == TERMINATE_RECORD_TYPE) return invalid("the file holds no image");
    if (type == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* ext = nullptr;
      if (DGifGetExtension(gif.get(), &code, &ext) == GIF_ERROR) return invalid(last_error());
      if (code == GRAPHICS_EXT_FUNC_CODE && ext != nullptr && ext[0] >= 4) {
        GraphicsControlBlock gcb;
        if (DGifExtensionToGCB(ext[0], ext + 1, &gcb) == GIF_OK) {
          transparent = gcb.TransparentColor;
        }
      }
      while (ext != nullptr) {
        if (DGifGetExtensionNext(gif.get(), &ext) == GIF_ERROR) return invalid(last_error());
      }
      continue;
    }
    if (type != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(gif.get()) == GIF_ERROR) return invalid(last_error());
    const GifImageDesc& desc = gif->Image;
    const ColorMapObject* colours = desc.ColorMap != nullptr ? desc.ColorMap : gif->SColorMap;
    if (colours == nullptr) return invalid("no colour table for the first image");
    if (desc.Width <= 0 || desc.Height <= 0) return invalid("first image of zero size");
    if (max_pixels != 0 && uint64_t(desc.Width) * uint64_t(desc.Height) > max_pixels) {
      return Status::InvalidArgument(TooLarge(desc.Width, desc.Height, max_pixels));
    }
    cv::Mat canvas(static_cast<int>(height), static_cast<int>(width), CV_8UC4,
                   cv::Scalar(0, 0, 0, 0));
    std::vector<GifPixelType> line(static_cast<size_t>(desc.Width));
    // Row order of the four interlace passes (GIF89a, appendix E), or top to bottom.
    std::vector<int> rows;
    if (desc.Interlace) {
      for (const auto& [first, step] :
           {std::pair{0, 8}, std::pair{4, 8}, std::pair{2, 4}, std::pair{1, 2}}) {
        for (int y = first; y < desc.Height; y += step) rows.push_back(y);
      }
    } else {
      for (int y = 0; y < desc.Height; ++y) rows.push_back(y);
    }
    for (const int y : rows) {
      if (DGifGetLine(gif.get(), line.data(), desc.Width) == GIF_ERROR) {
        return invalid(last_error() + " in row " + std::to_string(y) + " of the first image");
      }
      const int cy = desc.Top + y;
      if (cy < 0 || cy >= canvas.rows) continue;
      uint8_t* out = canvas.ptr<uint8_t>(cy);
      for (int x = 0; x < desc.Width; ++x) {
        const int cx = desc.Left + x;
        if (cx < 0 || cx >= canvas.cols) continue;
        const int index = line[static_cast<size_t>(x)];
        if (index == transparent) continue;  // stays (0, 0, 0, 0)
        uint8_t* px = out + 4 * cx;
        if (index < colours->ColorCount) {
          const GifColorType& c = colours->Colors[index];
          px[0] = c.Blue;
          px[1] = c.Green;
          px[2] = c.Red;
        }  // an index past the table is black, as in Pillow
        px[3] = 255;
      }
    }
    return canvas;
  }
}

// DecodeAnimatedWebpFirstFrame without the file name.
Result<cv::Mat> WebpFirstFrame(std::string_view bytes, uint64_t max_pixels) {
  auto invalid = [&](const std::string& why) {
    return Status::Corruption("truncated or invalid (libwebp: " + why + ")");
  };
  WebPBitstreamFeatures features;
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (WebPGetFeatures(data, bytes.size(), &features) != VP8_STATUS_OK) {
    return invalid("unreadable header");
  }
  const uint64_t width = static_cast<uint64_t>(std::max(features.width, 0));
  const uint64_t height = static_cast<uint64_t>(std::max(features.height, 0));
  if (max_pixels != 0 && width * height > max_pixels) {
    return Status::InvalidArgument(TooLarge(width, height, max_pixels));
  }
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) return invalid("libwebp version mismatch");
  options.color_mode = MODE_BGRA;
  options.use_threads = 0;
  const WebPData webp{data, bytes.size()};
  std::unique_ptr<WebPAnimDecoder, void (*)(WebPAnimDecoder*)> decoder(
      WebPAnimDecoderNew(&webp, &options), WebPAnimDecoderDelete);
  if (decoder == nullptr) return invalid("the demuxer cannot parse the animation");
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(decoder.get(), &info) || info.frame_count == 0) {
    return invalid("the animation holds no frame");
  }
  uint8_t* frame = nullptr;
  int timestamp_ms = 0;
  if (!WebPAnimDecoderGetNext(decoder.get(), &frame, &timestamp_ms)) {
    return invalid("the first frame does not decode");
  }
  // `frame` belongs to the decoder: copy it out before the decoder goes.
  return cv::Mat(static_cast<int>(info.canvas_height), static_cast<int>(info.canvas_width), CV_8UC4,
                 frame)
      .clone();
}

}  // namespace

bool IsAnimatedWebp(std::string_view bytes) {
  WebPBitstreamFeatures features;
  return WebPGetFeatures(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &features) ==
             VP8_STATUS_OK &&
         features.has_animation;
}

Result<cv::Mat> DecodeGifFirstFrame(std::string_view bytes, const std::string& path,
                                    uint64_t max_pixels) {
  Result<cv::Mat> frame = GifFirstFrame(bytes, max_pixels);
  if (!frame.ok()) return frame.status().WithFile(path);
  return frame;
}

Result<cv::Mat> DecodeAnimatedWebpFirstFrame(std::string_view bytes, const std::string& path,
                                             uint64_t max_pixels) {
  Result<cv::Mat> frame = WebpFirstFrame(bytes, max_pixels);
  if (!frame.ok()) return frame.status().WithFile(path);
  return frame;
}

}  // namespace kiln
