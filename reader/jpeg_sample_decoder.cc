#include "reader/jpeg_sample_decoder.h"

// jpeglib.h needs size_t and FILE declared first.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <string>

namespace kiln {

namespace {

// Warnings that are not about damaged data (the converter's decoder ignores the same ones).
bool HarmlessWarning(int msg_code) {
  switch (msg_code) {
    case JWRN_JFIF_MAJOR:
    case JWRN_ADOBE_XFORM:
    case JWRN_BOGUS_ICC:
    case JWRN_NOT_SEQUENTIAL:
      return true;
    default:
      return false;
  }
}

struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void ErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// A warning about damaged data ends the decode as an error: libjpeg would go on and fill the
// rest of the image with grey or garbage.
void EmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace messages
  if (HarmlessWarning(cinfo->err->msg_code)) return;
  ErrorExit(cinfo);
}

}  // namespace

struct JpegSampleDecoder::Impl {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  const uint8_t* stored = nullptr;  // the record being decoded, for the error's byte offset
  std::string body_error;           // a Corruption reason set by a step outside libjpeg
  std::vector<JSAMPROW> row_pointers;
  uint32_t channels = 0;  // of the image being decoded (ReadHeader)

  Impl() {
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = ErrorExit;
    err.pub.emit_message = EmitMessage;
    err.message[0] = '\0';
    jpeg_create_decompress(&cinfo);  // allocates only: cannot fail but for memory
  }
  ~Impl() { jpeg_destroy_decompress(&cinfo); }

  // Where libjpeg's source is in the record, in bytes from its first byte.
  uint64_t Position() const {
    if (cinfo.src == nullptr || cinfo.src->next_input_byte == nullptr || stored == nullptr) {
      return 0;
    }
    return static_cast<uint64_t>(cinfo.src->next_input_byte - stored);
  }
};

namespace {

// libjpeg's DSTATE_START (jpegint.h, its internal header): a decompressor ready for
// jpeg_read_header.
constexpr int kStartState = 200;

// Runs `body` (returns false with impl->body_error set on a non-libjpeg failure) with the
// error manager's jump target armed: a libjpeg error or damage warning lands here and becomes a
// Corruption status. Nothing with a destructor lives in the frames libjpeg can jump out of:
// bodies keep their buffers in the decoder's members.
template <typename Body>
Status RunGuarded(JpegSampleDecoder::Impl* impl, const uint8_t* stored, size_t stored_size,
                  Body body) {
  impl->stored = stored;
  impl->body_error.clear();
  // A decode left midway (the loader's SIGBUS scope jumps out of libjpeg when a mapped file
  // shrinks under it) leaves the decompressor in a decoding state: start from a clean one.
  if (impl->cinfo.global_state != kStartState) jpeg_abort_decompress(&impl->cinfo);
  if (setjmp(impl->err.jump) != 0) {
    const uint64_t at = impl->Position();
    jpeg_abort_decompress(&impl->cinfo);
    return Status::Corruption(std::string("JPEG: ") + impl->err.message + " at byte " +
                              std::to_string(at) + " of the record");
  }
  jpeg_mem_src(&impl->cinfo, stored, static_cast<unsigned long>(stored_size));
  const bool ok = body();
  jpeg_abort_decompress(&impl->cinfo);
  if (!ok) return Status::Corruption(impl->body_error);
  return Status::Ok();
}

}  // namespace

JpegSampleDecoder::JpegSampleDecoder(uint32_t channels, const AugmentOptions& augment,
                                     uint32_t out_height, uint32_t out_width, uint64_t seed,
                                     uint32_t max_side)
    : impl_(std::make_unique<Impl>()),
      channels_(channels),
      augment_(augment),
      out_height_(out_height),
      out_width_(out_width),
      seed_(seed),
      max_side_(max_side) {}

JpegSampleDecoder::JpegSampleDecoder(uint32_t channels, uint32_t max_side)
    : impl_(std::make_unique<Impl>()), channels_(channels), max_side_(max_side) {}

JpegSampleDecoder::~JpegSampleDecoder() = default;

// Reads the header into impl->cinfo and checks the image against `raw_size` (0: unchecked) and
// the max side; sets the output colour space. Inside RunGuarded only.
static bool ReadHeader(JpegSampleDecoder::Impl* impl, uint32_t channels, uint32_t max_side,
                       uint64_t raw_size) {
  jpeg_decompress_struct& c = impl->cinfo;
  jpeg_read_header(&c, TRUE);
  if (c.num_components != 1 && c.num_components != 3) {
    impl->body_error =
        "JPEG with " + std::to_string(c.num_components) + " components (a JPEG record has 1 or 3)";
    return false;
  }
  if (max_side != 0 && (c.image_width > max_side || c.image_height > max_side)) {
    impl->body_error = "JPEG image " + std::to_string(c.image_width) + "x" +
                       std::to_string(c.image_height) + " exceeds the dataset's max side " +
                       std::to_string(max_side);
    return false;
  }
  const uint64_t pixels = uint64_t{c.image_width} * c.image_height;
  if (channels == 0) {  // from the index's raw size: grey or colour
    channels = pixels != 0 && raw_size == pixels ? 1 : 3;
  }
  impl->channels = channels;
  const uint64_t bytes = pixels * channels;
  if (raw_size != 0 && bytes != raw_size) {
    impl->body_error = "JPEG image " + std::to_string(c.image_width) + "x" +
                       std::to_string(c.image_height) + "x" + std::to_string(channels) + " (" +
                       std::to_string(bytes) + " bytes) differs from the index's raw size " +
                       std::to_string(raw_size);
    return false;
  }
  c.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  return true;
}

Result<JpegInfo> JpegSampleDecoder::ReadInfo(const uint8_t* stored, size_t stored_size) {
  Impl* impl = impl_.get();
  JpegInfo info;
  KILN_RETURN_IF_ERROR(RunGuarded(impl, stored, stored_size, [&]() {
    if (!ReadHeader(impl, channels_, 0, 0)) return false;
    info.width = impl->cinfo.image_width;
    info.height = impl->cinfo.image_height;
    info.components = static_cast<uint32_t>(impl->cinfo.num_components);
    return true;
  }));
  return info;
}

Status JpegSampleDecoder::DecodeImage(const uint8_t* stored, size_t stored_size, uint32_t raw_size,
                                      uint8_t* out) {
  Impl* impl = impl_.get();
  const uint32_t c = channels_;
  return RunGuarded(impl, stored, stored_size, [&]() {
    if (!ReadHeader(impl, c, max_side_, raw_size)) return false;
    jpeg_decompress_struct& ci = impl->cinfo;
    const uint32_t width = ci.image_width, height = ci.image_height;
    // The box on the full-size image, drawn as for a stored sample of this size.
    const TensorSchema image{DType::kUint8, Layout::kHWC, height, width, c};
    const AugmentParams p = DrawAugmentParams(image, augment_, seed_, epoch_, sample_);
    // The smallest IDCT scale whose scaled box still covers the output: never upsample what a
    // larger scale would have had.
    uint32_t num = 8;
    for (uint32_t n : {1u, 2u, 4u}) {
      if ((uint64_t{p.box_width} * n + 7) / 8 >= out_width_ &&
          (uint64_t{p.box_height} * n + 7) / 8 >= out_height_) {
        num = n;
        break;
      }
    }
    last_scale_num_ = num;
    ci.scale_num = num;
    ci.scale_denom = 8;
    jpeg_start_decompress(&ci);
    const uint32_t sw = ci.output_width, sh = ci.output_height;
    // The box on the scaled image, rounded outwards to whole pixels.
    const double fx = static_cast<double>(sw) / width, fy = static_cast<double>(sh) / height;
    const auto lo = [](double v) { return static_cast<uint32_t>(std::floor(v)); };
    const auto hi = [](double v, uint32_t limit) {
      return std::min<uint32_t>(limit, static_cast<uint32_t>(std::ceil(v)));
    };
    uint32_t bx0 = std::min(lo(p.left * fx), sw - 1);
    uint32_t by0 = std::min(lo(p.top * fy), sh - 1);
    uint32_t bx1 = std::max(bx0 + 1, hi((p.left + p.box_width) * fx, sw));
    uint32_t by1 = std::max(by0 + 1, hi((p.top + p.box_height) * fy, sh));
    // Decode only the iMCU columns that hold the box (libjpeg widens the crop to them).
    JDIMENSION xoff = bx0, cw = bx1 - bx0;
    if (cw < sw) jpeg_crop_scanline(&ci, &xoff, &cw);
    if (xoff > bx0 || xoff + cw < bx1) {
      impl->body_error = "JPEG: column crop outside the box";  // libjpeg contract broken
      return false;
    }
    const uint32_t rows = by1 - by0;
    const size_t stride = size_t{ci.output_width} * c;
    region_.resize(stride * rows);
    if (by0 > 0) jpeg_skip_scanlines(&ci, by0);
    impl->row_pointers.resize(rows);
    for (uint32_t r = 0; r < rows; ++r) impl->row_pointers[r] = region_.data() + r * stride;
    uint32_t done = 0;
    while (done < rows) {
      const JDIMENSION n = jpeg_read_scanlines(&ci, impl->row_pointers.data() + done, rows - done);
      if (n == 0) {
        impl->body_error = "JPEG: no scanline decoded at row " + std::to_string(by0 + done);
        return false;
      }
      done += n;
    }
    const TensorSchema region{DType::kUint8, Layout::kHWC, rows, ci.output_width, c};
    const CropBox box{0, bx0 - static_cast<uint32_t>(xoff), rows, bx1 - bx0};
    rows_.resize(size_t{2} * out_width_ * c);
    ResizeCropBilinear(region_.data(), region, box, out_height_, out_width_, p.flip, out,
                       rows_.data());
    return true;
  });
}

Status JpegSampleDecoder::ValidateImage(const uint8_t* stored, size_t stored_size,
                                        uint32_t raw_size, uint8_t* scratch) {
  Impl* impl = impl_.get();
  const uint32_t c = channels_;
  return RunGuarded(impl, stored, stored_size, [&]() {
    if (!ReadHeader(impl, c, max_side_, raw_size)) return false;
    jpeg_decompress_struct& ci = impl->cinfo;
    jpeg_start_decompress(&ci);
    const size_t stride = size_t{ci.output_width} * impl->channels;
    while (ci.output_scanline < ci.output_height) {
      JSAMPROW row = scratch + size_t{ci.output_scanline} * stride;
      if (jpeg_read_scanlines(&ci, &row, 1) != 1) {
        impl->body_error = "JPEG: no scanline decoded at row " + std::to_string(ci.output_scanline);
        return false;
      }
    }
    jpeg_finish_decompress(&ci);  // reads to the end-of-image marker: damage after the last row
    return true;
  });
}

Result<JpegInfo> JpegSampleDecoder::DecodeFull(const uint8_t* stored, size_t stored_size,
                                               std::vector<uint8_t>* pixels) {
  KILN_ASSIGN_OR_RETURN(JpegInfo info, ReadInfo(stored, stored_size));
  pixels->resize(size_t{info.width} * info.height * (channels_ != 0 ? channels_ : 3));
  KILN_RETURN_IF_ERROR(
      ValidateImage(stored, stored_size, static_cast<uint32_t>(pixels->size()), pixels->data()));
  return info;
}

}  // namespace kiln
