// PNG decode + preprocess speed of three decoders on the same files (BENCHMARKS.md, "Converter:
// PNG through libspng?"):
//   opencv  kiln's path: kiln::DecodeImage (cv::imdecode IMREAD_UNCHANGED, then depth, alpha
//           and channel order as tools/imaging/decode_policy.md says);
//   spng    libspng 0.7 straight to R, G, B (or grey), 16-bit kept and rounded as kiln does;
//   libpng  libpng 1.6 driven directly (OpenCV's reader without OpenCV), R, G, B order.
// Each file is decoded and preprocessed (kiln::Preprocess to the schema) by every decoder in
// turn, the order rotating per round, and each decoder's thread CPU time is summed, so the
// load of a shared machine falls on all three alike. First it checks that the spng and libpng
// tensors equal kiln's byte for byte (files that differ or fail are listed and left out of the
// timing). Prints one JSON line per round and a last line with the medians.
//
//   png_decode_speed [--size S] [--channels 1|3] [--rounds R] FILE.png...
//
// S = 0 keeps each image's own size as the schema (no resize), for sets of one size.
#include <png.h>
#include <spng.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "tools/imaging/image_decoder.h"
#include "tools/imaging/image_header.h"
#include "tools/imaging/preprocessor.h"

namespace {

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// kiln's policy steps 3 to 5 (tools/imaging/decode_policy.md) on an image in R, G, B(, A) order:
// 16-bit to 8 by round(v / 257), alpha composited over white, grey replicated or colour
// turned to grey.
cv::Mat Normalise(cv::Mat image, int channels) {
  if (image.depth() == CV_16U) {
    cv::Mat eight;
    image.convertTo(eight, CV_8U, 1.0 / 257.0);
    image = eight;
  }
  if (image.channels() == 2 || image.channels() == 4) {
    const int cc = image.channels() - 1;
    cv::Mat out(image.rows, image.cols, CV_8UC(cc));
    for (int y = 0; y < image.rows; ++y) {
      const uint8_t* s = image.ptr<uint8_t>(y);
      uint8_t* d = out.ptr<uint8_t>(y);
      for (int x = 0; x < image.cols; ++x) {
        const uint32_t a = s[cc];
        for (int c = 0; c < cc; ++c) d[c] = uint8_t((s[c] * a + 255 * (255 - a) + 127) / 255);
        s += cc + 1;
        d += cc;
      }
    }
    image = out;
  }
  cv::Mat out;
  if (image.channels() == 1) {
    if (channels == 1) return image;
    cv::cvtColor(image, out, cv::COLOR_GRAY2RGB);
  } else {
    if (channels == 3) return image;
    cv::cvtColor(image, out, cv::COLOR_RGB2GRAY);
  }
  return out;
}

// libspng: which output format gives what OpenCV's IMREAD_UNCHANGED gives (in R, G, B order):
// palette and 1/2/4-bit grey expanded to 8 bits, tRNS applied to colour (RGB, palette) and
// ignored for grey, 16-bit kept (host byte order).
cv::Mat DecodeSpng(const std::string& bytes, int channels) {
  spng_ctx* ctx = spng_ctx_new(0);
  cv::Mat image;
  spng_set_png_buffer(ctx, bytes.data(), bytes.size());
  spng_ihdr ihdr;
  if (spng_get_ihdr(ctx, &ihdr) == 0) {
    spng_trns trns;
    const bool has_trns = spng_get_trns(ctx, &trns) == 0;
    const bool grey = (ihdr.color_type & 2) == 0;
    const bool alpha = (ihdr.color_type & 4) != 0 || (has_trns && !grey);
    int fmt = SPNG_FMT_PNG;
    int flags = 0;
    int type = 0;
    if (ihdr.color_type == SPNG_COLOR_TYPE_INDEXED || (alpha && (ihdr.color_type & 4) == 0)) {
      fmt = alpha ? (ihdr.bit_depth == 16 ? SPNG_FMT_RGBA16 : SPNG_FMT_RGBA8) : SPNG_FMT_RGB8;
      flags = alpha ? SPNG_DECODE_TRNS : 0;
      type = ihdr.bit_depth == 16 ? CV_16UC4 : CV_8UC(alpha ? 4 : 3);
    } else if (grey && ihdr.bit_depth < 8) {
      fmt = SPNG_FMT_G8;
      type = CV_8UC1;
    } else {
      const int cn = (grey ? 1 : 3) + (alpha ? 1 : 0);
      type = ihdr.bit_depth == 16 ? CV_16UC(cn) : CV_8UC(cn);
    }
    image.create(int(ihdr.height), int(ihdr.width), type);
    if (spng_decode_image(ctx, image.data, image.total() * image.elemSize(), fmt, flags) != 0) {
      image.release();
    }
  }
  spng_ctx_free(ctx);
  return image.empty() ? image : Normalise(image, channels);
}

struct PngSource {
  const std::string* bytes;
  size_t offset;
};

void ReadFromMemory(png_structp png, png_bytep out, png_size_t n) {
  PngSource* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (src->offset + n > src->bytes->size()) png_error(png, "read past the end");
  std::memcpy(out, src->bytes->data() + src->offset, n);
  src->offset += n;
}

// libpng with OpenCV 4.6's transforms (grfmt_png.cpp) minus png_set_bgr.
cv::Mat DecodeLibpng(const std::string& bytes, int channels) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_infop end = png_create_info_struct(png);
  PngSource src{&bytes, 0};
  cv::Mat image;
  std::vector<png_bytep> rows;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, &end);
    return cv::Mat();
  }
  png_set_read_fn(png, &src, ReadFromMemory);
  png_read_info(png, info);
  png_uint_32 w, h;
  int depth, colour;
  png_get_IHDR(png, info, &w, &h, &depth, &colour, nullptr, nullptr, nullptr);
  const bool grey = (colour & PNG_COLOR_MASK_COLOR) == 0;
  const bool alpha =
      (colour & PNG_COLOR_MASK_ALPHA) || (png_get_valid(png, info, PNG_INFO_tRNS) && !grey);
  if (alpha) {
    png_set_tRNS_to_alpha(png);
  } else {
    png_set_strip_alpha(png);
  }
  if (depth == 16) png_set_swap(png);
  if (colour == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (grey && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int cn = (grey ? 1 : 3) + (alpha ? 1 : 0);
  image.create(int(h), int(w), depth == 16 ? CV_16UC(cn) : CV_8UC(cn));
  rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = image.ptr(int(y));
  png_read_image(png, rows.data());
  png_read_end(png, end);
  png_destroy_read_struct(&png, &info, &end);
  return Normalise(image, channels);
}

struct Input {
  std::string path;
  std::string bytes;
  kiln::PreprocessOptions options;
};

using Decoder = std::function<bool(const Input&, int, uint8_t*)>;

}  // namespace

int main(int argc, char** argv) {
  uint32_t size = 224;
  int channels = 3;
  int rounds = 5;
  std::vector<Input> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--size" && i + 1 < argc) {
      size = uint32_t(std::atoi(argv[++i]));
    } else if (a == "--channels" && i + 1 < argc) {
      channels = std::atoi(argv[++i]);
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else {
      std::ifstream in(a, std::ios::binary);
      inputs.push_back({a, std::string((std::istreambuf_iterator<char>(in)), {}), {}});
    }
  }
  kiln::DecodeOptions decode;
  decode.channels = uint32_t(channels);
  const auto preprocess = [](const Input& in, const cv::Mat& image, uint8_t* out) {
    return !image.empty() && kiln::Preprocess(image, in.options, in.path, out).ok();
  };
  const std::array<const char*, 3> names{"opencv", "spng", "libpng"};
  const std::array<Decoder, 3> decoders{
      [&](const Input& in, int, uint8_t* out) {
        kiln::Result<cv::Mat> image = kiln::DecodeImage(in.bytes, in.path, decode);
        return image.ok() && preprocess(in, *image, out);
      },
      [&](const Input& in, int ch, uint8_t* out) {
        return kiln::PeekImageSize(in.bytes).ok() && preprocess(in, DecodeSpng(in.bytes, ch), out);
      },
      [&](const Input& in, int ch, uint8_t* out) {
        return kiln::PeekImageSize(in.bytes).ok() &&
               preprocess(in, DecodeLibpng(in.bytes, ch), out);
      }};

  // Equality with kiln's tensors; files that fail or differ are left out.
  std::vector<const Input*> timed;
  for (Input& in : inputs) {
    kiln::Result<kiln::ImageSize> header = kiln::PeekImageSize(in.bytes);
    if (!header.ok()) {
      std::fprintf(stderr, "skipped (not a PNG kiln reads): %s\n", in.path.c_str());
      continue;
    }
    const uint32_t w = size ? size : header->width, h = size ? size : header->height;
    in.options.schema = {kiln::DType::kUint8, kiln::Layout::kHWC, h, w, uint32_t(channels)};
    std::vector<std::vector<uint8_t>> out(3,
                                          std::vector<uint8_t>(in.options.schema.sample_bytes()));
    bool same = true;
    for (int d = 0; d < 3; ++d) {
      if (!decoders[d](in, channels, out[d].data()) || (d > 0 && out[d] != out[0])) {
        std::fprintf(stderr, "%s: %s %s\n", in.path.c_str(), names[d],
                     d == 0 ? "fails in kiln" : "differs from kiln or fails");
        same = false;
      }
    }
    if (same) timed.push_back(&in);
  }
  std::printf("{\"files\": %zu, \"equal_to_kiln\": %zu}\n", inputs.size(), timed.size());
  if (timed.empty()) return 1;

  std::array<std::vector<double>, 3> rates;
  std::vector<uint8_t> out;
  for (int r = 0; r < rounds; ++r) {
    std::array<double, 3> seconds{0, 0, 0};
    for (const Input* in : timed) {
      out.resize(in->options.schema.sample_bytes());
      for (int k = 0; k < 3; ++k) {
        const int d = (k + r) % 3;
        const double t0 = CpuSeconds();
        if (!decoders[d](*in, channels, out.data())) return 2;
        seconds[d] += CpuSeconds() - t0;
      }
    }
    std::printf("{\"round\": %d", r + 1);
    for (int d = 0; d < 3; ++d) {
      rates[d].push_back(double(timed.size()) / seconds[d]);
      std::printf(", \"%s_images_per_cpu_s\": %.1f", names[d], rates[d].back());
    }
    std::printf("}\n");
  }
  std::array<double, 3> median;
  for (int d = 0; d < 3; ++d) {
    std::sort(rates[d].begin(), rates[d].end());
    median[d] = rates[d][rates[d].size() / 2];
  }
  std::printf(
      "{\"size\": %u, \"channels\": %d, \"images\": %zu, \"rounds\": %d, \"opencv\": %.1f, "
      "\"spng\": %.1f, \"libpng\": %.1f, \"spng_over_opencv\": %.3f, \"libpng_over_opencv\": "
      "%.3f}\n",
      size, channels, timed.size(), rounds, median[0], median[1], median[2], median[1] / median[0],
      median[2] / median[0]);
  return 0;
}
