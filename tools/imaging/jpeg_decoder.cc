#include "tools/imaging/jpeg_decoder.h"

#include <jpeglib.h>

#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <cstring>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
// After jpeglib.h: the JWRN_* message codes.
#include <jerror.h>
#include <libexif/exif-data.h>

namespace kiln {
namespace {

constexpr int kApp1 = JPEG_APP0 + 1;

// libjpeg reports a fatal error through error_exit, which must not return: it jumps back to
// RunLibjpeg's setjmp with the message kept here.
// A warning that says the image data is damaged also jumps back (tools/imaging/decode_policy.md,
// "Damaged data"), with `damaged` set.
struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool damaged = false;
};

void ErrorExit(j_common_ptr cinfo) {
  ErrorManager* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

}  // namespace

bool IsHarmlessJpegWarning(int msg_code) {
  switch (msg_code) {
    case JWRN_JFIF_MAJOR:      // an unknown JFIF version number in APP0
    case JWRN_ADOBE_XFORM:     // an unknown Adobe colour transform code: libjpeg's default
    case JWRN_BOGUS_ICC:       // a malformed ICC profile, which kiln does not use
    case JWRN_NOT_SEQUENTIAL:  // Ss/Se/Ah/Al of a baseline SOS not 0/63/0/0: ignored by libjpeg
      return true;
    default:  // corrupt entropy-coded data, premature end, extraneous bytes before a marker,
              // lost restart sync, bad progression
      return false;
  }
}

namespace {

// libjpeg's warnings (msg_level -1) and trace messages (0 and up). A warning about damaged data
// stops the decode; the rest would be printed on stderr without the file's name, and are not.
void EmitMessage(j_common_ptr cinfo, int msg_level) {
  ErrorManager* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  if (msg_level >= 0) return;
  ++cinfo->err->num_warnings;
  if (IsHarmlessJpegWarning(cinfo->err->msg_code)) return;
  (*cinfo->err->format_message)(cinfo, err->message);
  err->damaged = true;
  std::longjmp(err->jump, 1);
}

enum class Outcome { kDecoded, kHeaderOnly, kFourComponents, kTooLarge, kError, kDamaged };

// Everything RunLibjpeg produces. Owned by the caller, so that nothing with a destructor lives
// in the frame that longjmp unwinds.
struct Decoded {
  cv::Mat image;       // R, G, B or grey, as stored (orientation not applied)
  uint64_t width = 0;  // from the header (full size, stored orientation)
  uint64_t height = 0;
  int orientation = 1;  // EXIF orientation of the first Exif APP1 segment (OrientationFromApp1)
  cv::Mat cmyk_row;     // scratch row for four-component files
  ErrorManager error;   // error.message when kError or kDamaged
};

// Returns true when an APP1 payload starts with the Exif identifier "Exif\0\0".
bool IsExifApp1(const uint8_t* app1, size_t size) {
  return size >= 6 && std::memcmp(app1, "Exif\0\0", 6) == 0;
}

// The Orientation tag of IFD0 in an APP1 payload ("Exif\0\0" then TIFF) of `size` bytes, or 1.
// Plain C calls that never longjmp, so RunLibjpeg may call it between its setjmp and a
// libjpeg error.
int OrientationFromApp1(const uint8_t* app1, size_t size) {
  if (!IsExifApp1(app1, size)) return 1;
  ExifData* exif = exif_data_new();
  if (exif == nullptr) return 1;
  // Read only: no tags added or "fixed" by libexif.
  exif_data_unset_option(exif, EXIF_DATA_OPTION_FOLLOW_SPECIFICATION);
  exif_data_load_data(exif, app1, static_cast<unsigned int>(size));
  int orientation = 1;
  ExifEntry* entry = exif_content_get_entry(exif->ifd[EXIF_IFD_0], EXIF_TAG_ORIENTATION);
  if (entry != nullptr && entry->format == EXIF_FORMAT_SHORT && entry->components >= 1 &&
      entry->data != nullptr && entry->size >= 2) {
    const int value = exif_get_short(entry->data, exif_data_get_byte_order(exif));
    if (value >= 1 && value <= 8) orientation = value;
  }
  exif_data_unref(exif);
  return orientation;
}

// Reads the header and, when `pixels`, the image of `bytes` (channels 1 or 3) into `out`,
// unless it has more than `max_pixels` pixels (0: no limit), scaled down in the IDCT as far as
// `min_width` x `min_height` (upright) allows (JpegScaleDenominator).
// Only plain data lives in this frame between setjmp and longjmp.
Outcome RunLibjpeg(const uint8_t* data, size_t size, int channels, bool pixels, uint64_t max_pixels,
                   uint32_t min_width, uint32_t min_height, Decoded* out) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&out->error.pub);
  out->error.pub.error_exit = ErrorExit;
  out->error.pub.emit_message = EmitMessage;
  out->error.message[0] = '\0';
  out->error.damaged = false;
  if (setjmp(out->error.jump) != 0) {
    jpeg_destroy_decompress(&cinfo);
    return out->error.damaged ? Outcome::kDamaged : Outcome::kError;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_save_markers(&cinfo, kApp1, 0xFFFF);
  jpeg_read_header(&cinfo, TRUE);
  // Phones write XMP (and XMP extension) APP1 segments before the Exif one: the first APP1
  // that is Exif holds the orientation, whatever comes before it.
  for (jpeg_saved_marker_ptr m = cinfo.marker_list; m != nullptr; m = m->next) {
    if (m->marker == kApp1 && IsExifApp1(m->data, m->data_length)) {
      out->orientation = OrientationFromApp1(m->data, m->data_length);
      break;
    }
  }
  const bool four_components = cinfo.num_components == 4 || cinfo.jpeg_color_space == JCS_CMYK ||
                               cinfo.jpeg_color_space == JCS_YCCK;
  if (four_components && !pixels) {
    jpeg_destroy_decompress(&cinfo);
    return Outcome::kFourComponents;
  }
  out->width = cinfo.image_width;
  out->height = cinfo.image_height;
  if (!pixels) {
    jpeg_destroy_decompress(&cinfo);
    return Outcome::kHeaderOnly;
  }
  if (max_pixels != 0 && out->width * out->height > max_pixels) {
    jpeg_destroy_decompress(&cinfo);
    return Outcome::kTooLarge;
  }
  if (four_components) {
    // OpenCV converts CMYK and YCCK to RGB; libjpeg-turbo does not. Decoding the scans here, to
    // CMYK rows that are thrown away, lets a damaged file be refused as for three components.
    cinfo.out_color_space = JCS_CMYK;
    jpeg_start_decompress(&cinfo);
    out->cmyk_row.create(1, static_cast<int>(cinfo.output_width), CV_8UC(cinfo.output_components));
    JSAMPROW row = out->cmyk_row.ptr<uint8_t>(0);
    while (cinfo.output_scanline < cinfo.output_height) jpeg_read_scanlines(&cinfo, &row, 1);
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    return Outcome::kFourComponents;
  }
  const bool grey = cinfo.jpeg_color_space == JCS_GRAYSCALE;
  // Shrink-on-load: the minimum is upright, the scale applies to the stored image, which
  // orientations 5..8 turn by 90 degrees.
  const bool turned = out->orientation >= 5;
  cinfo.scale_num = 1;
  cinfo.scale_denom = JpegScaleDenominator(out->width, out->height, turned ? min_height : min_width,
                                           turned ? min_width : min_height);
  // A colour JPEG asked for grey is decoded to RGB and converted as OpenCV converts BGR.
  cinfo.out_color_space = channels == 1 && grey ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  out->image.create(static_cast<int>(cinfo.output_height), static_cast<int>(cinfo.output_width),
                    cinfo.out_color_space == JCS_GRAYSCALE ? CV_8UC1 : CV_8UC3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->image.ptr<uint8_t>(static_cast<int>(cinfo.output_scanline));
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return Outcome::kDecoded;
}

}  // namespace

cv::Mat ApplyExifOrientation(const cv::Mat& image, int o) {
  cv::Mat out;
  switch (o) {
    case 2:
      cv::flip(image, out, 1);
      break;
    case 3:
      cv::flip(image, out, -1);
      break;
    case 4:
      cv::flip(image, out, 0);
      break;
    case 5:
      cv::transpose(image, out);
      break;
    case 6:
      cv::rotate(image, out, cv::ROTATE_90_CLOCKWISE);
      break;
    case 7: {
      cv::Mat t;
      cv::transpose(image, t);
      cv::flip(t, out, -1);
      break;
    }
    case 8:
      cv::rotate(image, out, cv::ROTATE_90_COUNTERCLOCKWISE);
      break;
    default:
      return image;
  }
  return out;
}

uint32_t JpegScaleDenominator(uint64_t width, uint64_t height, uint32_t min_width,
                              uint32_t min_height) {
  if (min_width == 0 || min_height == 0) return 1;
  for (const uint32_t d : {8u, 4u, 2u}) {
    // libjpeg's output size at scale 1/d: ceil(size / d) (jdiv_round_up in jdmaster.c).
    if ((width + d - 1) / d >= min_width && (height + d - 1) / d >= min_height) return d;
  }
  return 1;
}

int JpegExifOrientation(std::string_view bytes) {
  Decoded d;
  const Outcome o = RunLibjpeg(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 3,
                               false, 0, 0, 0, &d);
  return o == Outcome::kError ? 1 : d.orientation;
}

namespace {

// DecodeJpeg without the path: its messages are the bare reasons.
Result<cv::Mat> DecodeJpegBytes(std::string_view bytes, uint32_t channels, uint64_t max_pixels,
                                uint32_t min_width, uint32_t min_height, cv::Size* full_size) {
  if (channels != 1 && channels != 3) {
    return Status::NotSupported(std::to_string(channels) + " channels");
  }
  Decoded d;
  switch (RunLibjpeg(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                     static_cast<int>(channels), true, max_pixels, min_width, min_height, &d)) {
    case Outcome::kError:
      if (d.error.pub.msg_code == JERR_OUT_OF_MEMORY) {
        return Status::OutOfRange(
            "out of memory decoding this JPEG file (libjpeg: " + std::string(d.error.message) +
            "): the address-space or memory limit (RLIMIT_AS, the "
            "container's memory) is reached; lower --threads, or raise "
            "the limit");
      }
      return Status::Corruption("truncated or invalid (libjpeg: " + std::string(d.error.message) +
                                ")");
    case Outcome::kDamaged:
      return Status::Corruption("damaged image data (libjpeg: " + std::string(d.error.message) +
                                ")");
    case Outcome::kFourComponents:
      return Status::NotSupported("CMYK or YCCK JPEG");
    case Outcome::kTooLarge:
      return Status::InvalidArgument(std::to_string(d.width) + " x " + std::to_string(d.height) +
                                     " = " + std::to_string(d.width * d.height) +
                                     " pixels exceeds the limit of " + std::to_string(max_pixels) +
                                     " (raise --max-pixels)");
    case Outcome::kHeaderOnly:
    case Outcome::kDecoded:
      break;
  }
  if (full_size != nullptr) {
    const int w = static_cast<int>(d.width), h = static_cast<int>(d.height);
    *full_size = d.orientation >= 5 ? cv::Size(h, w) : cv::Size(w, h);
  }
  cv::Mat image = ApplyExifOrientation(d.image, d.orientation);
  if (channels == 1 && image.channels() == 3) {
    cv::Mat grey;
    cv::cvtColor(image, grey, cv::COLOR_RGB2GRAY);
    return grey;
  }
  return image;
}

}  // namespace

Result<cv::Mat> DecodeJpeg(std::string_view bytes, const std::string& path, uint32_t channels,
                           uint64_t max_pixels, uint32_t min_width, uint32_t min_height,
                           cv::Size* full_size) {
  Result<cv::Mat> image =
      DecodeJpegBytes(bytes, channels, max_pixels, min_width, min_height, full_size);
  if (!image.ok()) return image.status().WithFile(path);
  return image;
}

}  // namespace kiln
