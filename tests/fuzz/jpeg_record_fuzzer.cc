// Fuzz target: the reader's JPEG record decoder (reader/jpeg_sample_decoder.h) on untrusted
// stored bytes, as a fetch thread and `kiln verify --deep` call it. Input layout: byte 0 = output
// side (1 + byte % 64) and mode (bit 7: center crop, else RandomResizedCrop; bit 6: flip),
// bytes 1..3 = the index entry's raw_size as 24-bit little-endian (so at most 16 MiB is
// allocated), the rest = the record's stored bytes. Oracles besides "no crash, no sanitizer
// report, no hang": a successful DecodeImage writes only its out_side^2 x 3 bytes (the buffer is
// exactly that, ASan sees any overflow), a successful ValidateImage means the JPEG's size times
// the channels is raw_size, and a decode that fails is Corruption.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "reader/jpeg_sample_decoder.h"

namespace {

void Require(bool condition, const char* what, const std::string& detail) {
  if (condition) return;
  std::fprintf(stderr, "kiln jpeg_record_fuzzer: oracle failed: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  if (size < 4) return 0;
  const uint32_t side = 1 + (data[0] & 63u);
  AugmentOptions a;
  if ((data[0] & 0x80) != 0) {
    a.center_crop_height = a.center_crop_width = side;
  } else {
    a.resize_height = a.resize_width = side;
  }
  a.flip = (data[0] & 0x40) != 0;
  const uint32_t raw_size =
      uint32_t{data[1]} | (uint32_t{data[2]} << 8) | (uint32_t{data[3]} << 16);
  // The stored bytes live in their own allocation, so ASan sees any read past their end.
  const std::vector<uint8_t> stored(data + 4, data + size);
  // Decoders are reused across inputs, as fetch threads reuse theirs after an error.
  static JpegSampleDecoder* sample = nullptr;
  static uint32_t sample_side = 0, sample_mode = 0;
  if (sample == nullptr || sample_side != side || sample_mode != (data[0] & 0xc0u)) {
    delete sample;
    sample = new JpegSampleDecoder(3, a, side, side, 7, /*max_side=*/0);
    sample_side = side;
    sample_mode = data[0] & 0xc0u;
  }
  sample->SetSample(1, size);
  std::vector<uint8_t> out(size_t{side} * side * 3);
  Status s = sample->DecodeImage(stored.data(), stored.size(), raw_size, out.data());
  Require(s.ok() || s.code() == StatusCode::kCorruption, "DecodeImage fails as Corruption",
          s.ToString());
  static JpegSampleDecoder whole(0);
  std::vector<uint8_t> scratch(raw_size);
  s = whole.ValidateImage(stored.data(), stored.size(), raw_size, scratch.data());
  Require(s.ok() || s.code() == StatusCode::kCorruption, "ValidateImage fails as Corruption",
          s.ToString());
  if (s.ok()) {
    Result<JpegInfo> info = whole.ReadInfo(stored.data(), stored.size());
    Require(info.ok(), "a validated JPEG has a header", info.status().ToString());
    const uint64_t pixels = uint64_t{info->width} * info->height;
    Require(pixels * 3 == raw_size || pixels == raw_size, "validated size is raw_size",
            std::to_string(pixels) + " pixels, raw " + std::to_string(raw_size));
  }
  return 0;
}
