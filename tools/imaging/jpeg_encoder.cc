#include "tools/imaging/jpeg_encoder.h"

// jpeglib.h needs size_t and FILE declared first.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
// clang-format off
#include <jpeglib.h>
// clang-format on

#include <algorithm>
#include <opencv2/imgproc.hpp>

namespace kiln {

namespace {

struct EncodeError {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void EncodeErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<EncodeError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// The libjpeg calls, in a frame that holds nothing with a destructor (longjmp skips them).
// `*buffer` and `*size` are jpeg_mem_dest's: malloc'ed by libjpeg, freed by the caller.
bool RunEncoder(const cv::Mat& image, int quality, unsigned char** buffer, unsigned long* size,
                EncodeError* err) {
  jpeg_compress_struct cinfo;
  cinfo.err = jpeg_std_error(&err->pub);
  err->pub.error_exit = EncodeErrorExit;
  if (setjmp(err->jump) != 0) {
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, buffer, size);
  cinfo.image_width = static_cast<JDIMENSION>(image.cols);
  cinfo.image_height = static_cast<JDIMENSION>(image.rows);
  cinfo.input_components = image.channels();
  cinfo.in_color_space = image.channels() == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);  // 4:2:0 YCbCr for colour, islow DCT, no optimisation
  jpeg_set_quality(&cinfo, quality, TRUE);
  cinfo.write_JFIF_header = TRUE;
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(image.ptr<uint8_t>(static_cast<int>(cinfo.next_scanline)));
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

}  // namespace

cv::Size JpegRecordSize(uint64_t width, uint64_t height, uint32_t max_side) {
  const uint64_t longer = std::max(width, height), shorter = std::min(width, height);
  if (longer <= max_side) return cv::Size(static_cast<int>(width), static_cast<int>(height));
  const int s = static_cast<int>(std::max<uint64_t>(1, shorter * max_side / longer));
  const int l = static_cast<int>(max_side);
  return width >= height ? cv::Size(l, s) : cv::Size(s, l);
}

Status EncodeJpeg(const cv::Mat& image, int quality, std::vector<uint8_t>* out) {
  EncodeError err;
  err.message[0] = '\0';
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const bool ok = RunEncoder(image, quality, &buffer, &size, &err);
  if (ok) out->assign(buffer, buffer + size);
  std::free(buffer);  // jpeg_mem_dest's buffer (also after a failure, when one was made)
  if (!ok) return Status::Internal(std::string("JPEG encoding failed: ") + err.message);
  return Status::Ok();
}

Status EncodeJpegRecord(const cv::Mat& image, const JpegRecordOptions& options, int64_t label,
                        std::string key, const std::string& path, EncodedRecord* record,
                        cv::Size full_size) {
  const auto fail = [&](const std::string& reason) {
    return Status::InvalidArgument(path.empty() ? reason : path + ": " + reason);
  };
  if (image.empty() || image.depth() != CV_8U || (image.channels() != 1 && image.channels() != 3)) {
    return fail("a JPEG record needs an 8-bit image of 1 or 3 channels");
  }
  if (options.max_side == 0 || options.max_side > kMaxJpegSide || options.quality < 1 ||
      options.quality > 100) {
    return fail("JPEG record options out of range (max side " + std::to_string(options.max_side) +
                ", quality " + std::to_string(options.quality) + ")");
  }
  if (full_size.empty()) full_size = image.size();
  const cv::Size target = JpegRecordSize(static_cast<uint64_t>(full_size.width),
                                         static_cast<uint64_t>(full_size.height), options.max_side);
  cv::Mat sized = image;
  if (target != image.size()) {
    const bool shrink = target.width <= image.cols && target.height <= image.rows;
    cv::resize(image, sized, target, 0, 0, shrink ? cv::INTER_AREA : cv::INTER_LINEAR);
  }
  KILN_RETURN_IF_ERROR(EncodeJpeg(sized, options.quality, &record->stored));
  record->raw_size = static_cast<uint32_t>(uint64_t{static_cast<uint64_t>(sized.cols)} *
                                           static_cast<uint64_t>(sized.rows) *
                                           static_cast<uint64_t>(sized.channels()));
  record->codec = Codec::kJpeg;
  record->label = label;
  record->key = std::move(key);
  record->checksum = RecordChecksum(record->stored.data(), record->stored.size(), label);
  return Status::Ok();
}

}  // namespace kiln
