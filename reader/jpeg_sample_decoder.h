// kiln::JpegSampleDecoder: decodes the JPEG records of a dataset packed with `kiln pack --codec
// jpeg:QUALITY --max-side N` (Codec::kJpeg, formats/shards/shard_format.md section 4) into
// fixed-shape output samples, with libjpeg-turbo.
//
// For each record: the JPEG header gives the image's size (H x W, each at most the max side);
// the crop box is drawn on that size exactly as for a stored sample (DrawAugmentParams in
// reader/augmenter.h: RandomResizedCrop from (seed, epoch, sample), or the center crop); the
// image is decoded at the smallest IDCT scale of 1/8, 1/4, 1/2 and 1 (scale_num / 8) whose
// scaled box is still at least the output size on both sides, and only the rows and iMCU columns
// that hold the box (jpeg_skip_scanlines, jpeg_crop_scanline); the box, mapped onto the scaled
// image, is then resized bilinearly to the output size (ResizeCropBilinear), mirrored when the
// draw says so. The output is a pure function of (record bytes, options, seed, epoch, sample):
// byte-identical whatever thread, thread count, io path or resume.
//
// Damaged data: libjpeg's fatal errors return through setjmp/longjmp to a Corruption status
// ("JPEG: <libjpeg's message> at byte B of the record"); its warnings about damaged data
// (premature end, corrupt entropy data, ...) are errors too. A record never crashes the reader.
// The caller (ShardReader through RecordDecoder) prefixes the file, record and byte offset.
//
// Thread safety: one decoder per thread (it owns a libjpeg decompressor and buffers).
#ifndef KILN_READER_JPEG_SAMPLE_DECODER_H_
#define KILN_READER_JPEG_SAMPLE_DECODER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "formats/record_codec.h"
#include "formats/status.h"
#include "formats/tensor_schema.h"
#include "reader/augmenter.h"

namespace kiln {

// The header fields of a JPEG: size in pixels and components (1 grey, 3 colour).
struct JpegInfo {
  uint32_t width = 0, height = 0, components = 0;
};

class JpegSampleDecoder final : public ImageRecordDecoder {
 public:
  // `channels`: 1 or 3, the dataset's (a colour JPEG becomes grey, a grey one is replicated).
  // `augment`: RandomResizedCrop or the center crop (AugmentOptions::resamples() must hold) and
  // the flip; `out_height` x `out_width` its output size; `seed` the loader's. `max_side`:
  // records whose image has a longer side are Corruption (0: unchecked).
  JpegSampleDecoder(uint32_t channels, const AugmentOptions& augment, uint32_t out_height,
                    uint32_t out_width, uint64_t seed, uint32_t max_side);
  // A decoder for ValidateImage and DecodeFull only (`kiln verify --deep`, tests). `channels`
  // 0: ValidateImage takes them from the raw size (1 when it is width x height, else 3).
  explicit JpegSampleDecoder(uint32_t channels, uint32_t max_side = 0);
  ~JpegSampleDecoder() override;
  JpegSampleDecoder(const JpegSampleDecoder&) = delete;
  JpegSampleDecoder& operator=(const JpegSampleDecoder&) = delete;

  // Names the sample the next DecodeImage decodes: the crop and flip are drawn for (seed, epoch,
  // sample). Call before each record.
  void SetSample(uint64_t epoch, uint64_t sample) {
    epoch_ = epoch;
    sample_ = sample;
  }

  // Writes one output sample, uint8 HWC out_height x out_width x channels, to `out`, as the
  // header says. `raw_size` must equal the image's height x width x channels. Errors:
  // Corruption ("JPEG: ...", "JPEG image WxH ... differs from the index's raw size N").
  Status DecodeImage(const uint8_t* stored, size_t stored_size, uint32_t raw_size,
                     uint8_t* out) override;
  // Decodes the whole image at full scale into `scratch` (raw_size bytes, uint8 HWC), reading
  // every scan to the end of the image. Errors: as DecodeImage.
  Status ValidateImage(const uint8_t* stored, size_t stored_size, uint32_t raw_size,
                       uint8_t* scratch) override;
  // Decodes the whole image at full scale into `pixels` (uint8 HWC, resized to fit) and returns
  // its size. Errors: as DecodeImage.
  Result<JpegInfo> DecodeFull(const uint8_t* stored, size_t stored_size,
                              std::vector<uint8_t>* pixels);
  // Reads the header only. Errors: Corruption.
  Result<JpegInfo> ReadInfo(const uint8_t* stored, size_t stored_size);

  // The IDCT scale numerator (of 8) the last DecodeImage used: 1, 2, 4 or 8.
  uint32_t last_scale_num() const { return last_scale_num_; }

  struct Impl;  // internal: the libjpeg state, kept out of this header (jpeglib.h)

 private:
  std::unique_ptr<Impl> impl_;
  uint32_t channels_;
  AugmentOptions augment_;
  uint32_t out_height_ = 0, out_width_ = 0;
  uint64_t seed_ = 0;
  uint32_t max_side_ = 0;
  uint64_t epoch_ = 0, sample_ = 0;
  uint32_t last_scale_num_ = 8;
  std::vector<uint8_t> region_;  // the decoded rows and columns that hold the box
  std::vector<float> rows_;      // ResizeCropBilinear's scratch
};

}  // namespace kiln

#endif  // KILN_READER_JPEG_SAMPLE_DECODER_H_
