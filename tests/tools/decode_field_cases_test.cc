// Field cases B02, B04, B05, B06 (converter part), B13, B14 and B15, exercised on
// the converter's decode and preprocess stages. Every trigger input is built here, in memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tools/imaging/image_decoder.h"
#include "tools/imaging/preprocessor.h"

namespace kiln {
namespace {

// ---- Tiny PNG writer: chunks with CRC-32, zlib streams of stored or fixed-Huffman blocks. ----

uint32_t Crc32(const std::string& data, uint32_t crc = 0) {
  crc = ~crc;
  for (unsigned char byte : data) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

std::string Be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string Chunk(const std::string& type, const std::string& data) {
  return Be32(static_cast<uint32_t>(data.size())) + type + data + Be32(Crc32(type + data));
}

uint32_t Adler32(const std::string& data) {
  uint32_t a = 1, b = 0;
  for (unsigned char byte : data) {
    a = (a + byte) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

// A zlib stream holding `raw` in stored (uncompressed) deflate blocks.
std::string ZlibStored(const std::string& raw) {
  std::string out = "\x78\x01";
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(65535, raw.size() - pos);
    const bool last = pos + n == raw.size();
    out += static_cast<char>(last ? 1 : 0);
    out += static_cast<char>(n & 0xFF);
    out += static_cast<char>(n >> 8);
    out += static_cast<char>(~n & 0xFF);
    out += static_cast<char>((~n >> 8) & 0xFF);
    out += raw.substr(pos, n);
    pos += n;
  } while (pos < raw.size());
  return out + Be32(Adler32(raw));
}

// A zlib stream that inflates to `count` zero bytes: one literal 0, then matches of length 258
// at distance 1 in a fixed-Huffman block (13 bits per 258 bytes), so huge images stay small.
std::string ZlibZeros(uint64_t count) {
  std::string out = "\x78\x01";
  uint64_t bit_buffer = 0;
  int bit_count = 0;
  auto put_bits = [&](uint32_t value, int n) {  // LSB-first, as deflate packs header fields.
    bit_buffer |= uint64_t{value} << bit_count;
    bit_count += n;
    while (bit_count >= 8) {
      out += static_cast<char>(bit_buffer & 0xFF);
      bit_buffer >>= 8;
      bit_count -= 8;
    }
  };
  auto put_code = [&](uint32_t code, int n) {  // Huffman codes go most significant bit first.
    for (int i = n - 1; i >= 0; --i) put_bits((code >> i) & 1, 1);
  };
  put_bits(1, 1);     // BFINAL.
  put_bits(1, 2);     // BTYPE = 01, fixed Huffman.
  put_code(0x30, 8);  // Literal 0.
  uint64_t left = count - 1;
  for (; left >= 258; left -= 258) {
    put_code(0xC5, 8);  // Length symbol 285 = 258 bytes.
    put_code(0, 5);     // Distance symbol 0 = distance 1.
  }
  for (; left > 0; --left) put_code(0x30, 8);
  put_code(0, 7);  // End of block (256).
  if (bit_count > 0) put_bits(0, 8 - bit_count);
  // Adler-32 of zeros: a stays 1, b adds 1 per byte.
  const uint32_t b = static_cast<uint32_t>(count % 65521);
  return out + Be32((b << 16) | 1);
}

std::string Ihdr(uint32_t width, uint32_t height, int bit_depth, int color_type) {
  std::string data = Be32(width) + Be32(height);
  data += static_cast<char>(bit_depth);
  data += static_cast<char>(color_type);
  data += std::string(3, '\0');  // Compression, filter, interlace.
  return Chunk("IHDR", data);
}

// A PNG with the given IHDR fields, extra chunks (PLTE, tRNS) and a zlib stream for IDAT.
std::string Png(uint32_t width, uint32_t height, int bit_depth, int color_type,
                const std::string& extra_chunks, const std::string& zlib) {
  return std::string("\x89PNG\r\n\x1a\n", 8) + Ihdr(width, height, bit_depth, color_type) +
         extra_chunks + Chunk("IDAT", zlib) + Chunk("IEND", "");
}

std::string Encode(const cv::Mat& image, const std::string& ext, std::vector<int> params = {}) {
  std::vector<uchar> buffer;
  EXPECT_TRUE(cv::imencode(ext, image, buffer, params));
  return std::string(buffer.begin(), buffer.end());
}

cv::Mat Decode(const std::string& bytes, uint32_t channels = 3, uint8_t background = 255) {
  DecodeOptions options;
  options.channels = channels;
  options.background = background;
  Result<cv::Mat> image = DecodeImage(bytes, "test.img", options);
  EXPECT_TRUE(image.ok()) << image.status().ToString();
  return image.ok() ? *image : cv::Mat();
}

std::vector<uint8_t> Tensor(const cv::Mat& image, const PreprocessOptions& options,
                            const std::string& path = "test.img") {
  std::vector<uint8_t> out(options.schema.sample_bytes());
  Status status = Preprocess(image, options, path, out.data());
  EXPECT_TRUE(status.ok()) << status.ToString();
  return out;
}

PreprocessOptions Options(uint32_t height, uint32_t width, uint32_t channels,
                          DType dtype = DType::kUint8, CropMode crop = CropMode::kNone) {
  PreprocessOptions options;
  options.schema.height = height;
  options.schema.width = width;
  options.schema.channels = channels;
  options.schema.dtype = dtype;
  options.crop = crop;
  return options;
}

int MaxAbsDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  int worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

using ::kiln::testing::ReadTestInput;

// ---- B02: EXIF-only rotations and mirrors. ----

// The canonical 48 x 32 picture: six 16 x 16 blocks of distinct colours (BGR for OpenCV).
cv::Mat SixBlocks() {
  const cv::Scalar colours[6] = {{40, 40, 200},  {40, 200, 40},  {200, 40, 40},
                                 {40, 200, 200}, {200, 200, 40}, {200, 40, 200}};
  cv::Mat image(32, 48, CV_8UC3);
  for (int i = 0; i < 6; ++i) {
    image(cv::Rect((i % 3) * 16, (i / 3) * 16, 16, 16)).setTo(colours[i]);
  }
  return image;
}

// Stores `canonical` so that applying EXIF `orientation` displays `canonical`: the inverse of
// the display transform (2, 3, 4, 5, 7 are their own inverses; 6 and 8 invert each other).
cv::Mat StoredForOrientation(const cv::Mat& canonical, int orientation) {
  cv::Mat out;
  switch (orientation) {
    case 1:
      out = canonical.clone();
      break;
    case 2:
      cv::flip(canonical, out, 1);
      break;  // Mirror left-right.
    case 3:
      cv::rotate(canonical, out, cv::ROTATE_180);
      break;
    case 4:
      cv::flip(canonical, out, 0);
      break;  // Mirror top-bottom.
    case 5:
      cv::transpose(canonical, out);
      break;  // Main diagonal.
    case 6:
      cv::rotate(canonical, out, cv::ROTATE_90_COUNTERCLOCKWISE);
      break;
    case 7:
      cv::transpose(canonical, out);
      cv::rotate(out, out, cv::ROTATE_180);
      break;
    case 8:
      cv::rotate(canonical, out, cv::ROTATE_90_CLOCKWISE);
      break;
  }
  return out;
}

// Inserts an APP1 Exif segment holding only IFD0 Orientation = `orientation` after the JFIF
// APP0 segment that cv::imencode writes.
std::string WithExifOrientation(const std::string& jpeg, int orientation) {
  std::string tiff = std::string("MM\0*", 4) + Be32(8);  // Big-endian TIFF, IFD0 at offset 8.
  tiff += std::string("\0\x01", 2);                      // One entry.
  tiff += std::string("\x01\x12\0\x03", 4) + Be32(1);    // Tag 0x0112, SHORT, count 1.
  tiff += static_cast<char>(0);
  tiff += static_cast<char>(orientation);
  tiff += std::string(2, '\0');  // Value padding.
  tiff += Be32(0);               // No next IFD.
  const std::string payload = std::string("Exif\0\0", 6) + tiff;
  const size_t length = payload.size() + 2;
  std::string app1 = "\xFF\xE1";
  app1 += static_cast<char>(length >> 8);
  app1 += static_cast<char>(length & 0xFF);
  app1 += payload;
  EXPECT_EQ(jpeg.substr(0, 4), "\xFF\xD8\xFF\xE0");
  const size_t app0_end =
      4 + ((static_cast<unsigned char>(jpeg[4]) << 8) | static_cast<unsigned char>(jpeg[5]));
  return jpeg.substr(0, app0_end) + app1 + jpeg.substr(app0_end);
}

TEST(DecodeFieldCases, FieldCase_B02_AllEightExifOrientationsPackIdentically) {
  const cv::Mat canonical = SixBlocks();
  const PreprocessOptions options = Options(32, 48, 3);
  std::vector<uint8_t> reference;
  int oriented = 0;
  for (int orientation = 1; orientation <= 8; ++orientation) {
    SCOPED_TRACE("orientation " + std::to_string(orientation));
    const cv::Mat stored = StoredForOrientation(canonical, orientation);
    if (orientation != 1) {
      // The test would prove nothing if the stored pixels already looked upright.
      ASSERT_TRUE(stored.size() != canonical.size() ||
                  cv::norm(stored, canonical, cv::NORM_INF) > 100);
    }
    const std::string jpeg =
        WithExifOrientation(Encode(stored, ".jpg", {cv::IMWRITE_JPEG_QUALITY, 100}), orientation);
    const cv::Mat decoded = Decode(jpeg);
    ASSERT_EQ(decoded.cols, 48);
    ASSERT_EQ(decoded.rows, 32);
    // Block (0, 0) is red in R, G, B order.
    const cv::Vec3b corner = decoded.at<cv::Vec3b>(8, 8);
    EXPECT_NEAR(corner[0], 200, 6);
    EXPECT_NEAR(corner[1], 40, 6);
    EXPECT_NEAR(corner[2], 40, 6);
    const std::vector<uint8_t> tensor = Tensor(decoded, options);
    if (orientation == 1) {
      reference = tensor;
    } else {
      EXPECT_LE(MaxAbsDiff(tensor, reference), 6);
      ++oriented;
    }
  }
  EXPECT_EQ(oriented, 7);
}

TEST(DecodeFieldCases, FieldCase_B02_RealExifFilesDisplayUpright) {
  // The same 50 x 70 picture stored with EXIF orientation 1..8 (5..8 stored as 70 x 50), and
  // with no EXIF at all (orientation_0.jpg).
  const std::string dir = "/usr/share/gocode/src/github.com/disintegration/imaging/testdata/";
  const cv::Mat upright = Decode(ReadTestInput(dir + "orientation_0.jpg"));
  ASSERT_EQ(upright.cols, 50);
  ASSERT_EQ(upright.rows, 70);
  for (int orientation = 1; orientation <= 8; ++orientation) {
    SCOPED_TRACE("orientation " + std::to_string(orientation));
    const cv::Mat decoded =
        Decode(ReadTestInput(dir + "orientation_" + std::to_string(orientation) + ".jpg"));
    ASSERT_EQ(decoded.cols, 50);
    ASSERT_EQ(decoded.rows, 70);
    // Each file was re-encoded, so compare the mean error; a wrong orientation gives ~50+.
    cv::Mat diff;
    cv::absdiff(decoded, upright, diff);
    const cv::Scalar mean = cv::mean(diff);
    EXPECT_LT((mean[0] + mean[1] + mean[2]) / 3, 6.0);
  }
}

// ---- B04: 16-bit PNG. ----

TEST(DecodeFieldCases, FieldCase_B04_SixteenBitGreyScalesToEightBit) {
  cv::Mat grey16(1, 4, CV_16UC1);
  grey16.at<uint16_t>(0, 0) = 0;
  grey16.at<uint16_t>(0, 1) = 0x1234;
  grey16.at<uint16_t>(0, 2) = 0x8000;
  grey16.at<uint16_t>(0, 3) = 0xFFFF;
  const std::string png = Encode(grey16, ".png");
  ASSERT_EQ(static_cast<unsigned char>(png[24]), 16);  // IHDR bit depth: really 16-bit.

  const cv::Mat grey = Decode(png, 1);
  ASSERT_EQ(grey.type(), CV_8UC1);
  EXPECT_EQ(std::vector<uint8_t>(grey.begin<uint8_t>(), grey.end<uint8_t>()),
            (std::vector<uint8_t>{0, 18, 128, 255}));

  const cv::Mat rgb = Decode(png, 3);
  ASSERT_EQ(rgb.type(), CV_8UC3);
  const uint8_t expected[4] = {0, 18, 128, 255};
  for (int x = 0; x < 4; ++x) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(rgb.at<cv::Vec3b>(0, x)[c], expected[x]);
  }

  // Float output: the 16-bit values scaled to [0, 1] (to 8-bit precision).
  const std::vector<uint8_t> bytes = Tensor(grey, Options(1, 4, 1, DType::kFloat32));
  const double sixteen_bit[4] = {0, 0x1234, 0x8000, 0xFFFF};
  for (int x = 0; x < 4; ++x) {
    float f;
    std::memcpy(&f, &bytes[4 * x], 4);  // The test host is little-endian like the format.
    EXPECT_NEAR(f, sixteen_bit[x] / 65535.0, 0.002) << x;
  }
}

TEST(DecodeFieldCases, FieldCase_B04_SixteenBitRgbaOpaque) {
  // 2 x 2, BGRA order for OpenCV: R = 0x1234, G = 0x8000, B = 0xFFFF, alpha opaque.
  cv::Mat rgba16(2, 2, CV_16UC4, cv::Scalar(0xFFFF, 0x8000, 0x1234, 0xFFFF));
  const std::string png = Encode(rgba16, ".png");
  ASSERT_EQ(static_cast<unsigned char>(png[24]), 16);
  ASSERT_EQ(static_cast<unsigned char>(png[25]), 6);  // Colour type RGBA.
  const cv::Mat rgb = Decode(png, 3);
  ASSERT_EQ(rgb.type(), CV_8UC3);
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 2; ++x) EXPECT_EQ(rgb.at<cv::Vec3b>(y, x), cv::Vec3b(18, 128, 255));
  }
}

// ---- B05: palette + tRNS, RGBA, 1/4-bit palettes, grey + alpha. ----

// 4 x 4 checkerboard: index 1 (red, opaque) where x + y is odd, index 0 (transparent green).
int CheckerIndex(int x, int y) { return (x + y) % 2; }

std::string PalettePng(int bit_depth, bool with_trns) {
  std::string raw;
  for (int y = 0; y < 4; ++y) {
    raw += '\0';  // Filter: none.
    std::vector<uint8_t> row((4 * bit_depth + 7) / 8, 0);
    for (int x = 0; x < 4; ++x) {
      const int bit = x * bit_depth;
      row[bit / 8] |= CheckerIndex(x, y) << (8 - bit_depth - bit % 8);
    }
    raw.append(row.begin(), row.end());
  }
  std::string chunks = Chunk("PLTE", std::string("\x00\xFF\x00\xFF\x00\x00", 6));
  if (with_trns) chunks += Chunk("tRNS", std::string("\x00", 1));
  return Png(4, 4, bit_depth, 3, chunks, ZlibStored(raw));
}

std::string RgbaPng() {
  cv::Mat bgra(4, 4, CV_8UC4);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) {
      bgra.at<cv::Vec4b>(y, x) =
          CheckerIndex(x, y) ? cv::Vec4b(0, 0, 255, 255) : cv::Vec4b(0, 255, 0, 0);
    }
  }
  return Encode(bgra, ".png");
}

TEST(DecodeFieldCases, FieldCase_B05_TransparencyCompositedOverWhiteInEveryVariant) {
  const std::vector<std::pair<std::string, std::string>> variants = {
      {"palette 8-bit + tRNS", PalettePng(8, true)}, {"RGBA", RgbaPng()},
      {"palette 1-bit + tRNS", PalettePng(1, true)}, {"palette 4-bit + tRNS", PalettePng(4, true)},
      {"palette 2-bit + tRNS", PalettePng(2, true)},
  };
  const PreprocessOptions options = Options(4, 4, 3);
  std::vector<uint8_t> expected;
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) {
      const bool red = CheckerIndex(x, y);
      expected.insert(expected.end(), {255, static_cast<uint8_t>(red ? 0 : 255),
                                       static_cast<uint8_t>(red ? 0 : 255)});
    }
  }
  for (const auto& [name, png] : variants) {
    SCOPED_TRACE(name);
    const cv::Mat image = Decode(png);
    ASSERT_EQ(image.type(), CV_8UC3);
    EXPECT_EQ(Tensor(image, options), expected);
    // Another background: transparent pixels take it, never the hidden green.
    const cv::Mat on_black = Decode(png, 3, 0);
    EXPECT_EQ(on_black.at<cv::Vec3b>(0, 0), cv::Vec3b(0, 0, 0));
    EXPECT_EQ(on_black.at<cv::Vec3b>(0, 1), cv::Vec3b(255, 0, 0));
    // Grey output composites too: white stays 255, red becomes BT.601 luma 76.
    const cv::Mat grey = Decode(png, 1);
    ASSERT_EQ(grey.type(), CV_8UC1);
    EXPECT_EQ(grey.at<uint8_t>(0, 0), 255);
    EXPECT_EQ(grey.at<uint8_t>(0, 1), 76);
  }
  // Without tRNS the palette's green is a real colour and stays green.
  const cv::Mat opaque = Decode(PalettePng(8, false));
  EXPECT_EQ(opaque.at<cv::Vec3b>(0, 0), cv::Vec3b(0, 255, 0));
  EXPECT_EQ(opaque.at<cv::Vec3b>(0, 1), cv::Vec3b(255, 0, 0));
}

TEST(DecodeFieldCases, FieldCase_B05_GreyAlphaPng) {
  // 2 x 2 grey + alpha: (77, opaque), (0, transparent), (0, alpha 128), (200, alpha 100).
  const std::string raw = std::string("\0", 1) + std::string("\x4D\xFF\x00\x00", 4) +
                          std::string("\0", 1) + std::string("\x00\x80\xC8\x64", 4);
  const std::string png = Png(2, 2, 8, 4, "", ZlibStored(raw));
  const cv::Mat rgb = Decode(png, 3);
  ASSERT_EQ(rgb.type(), CV_8UC3);
  // round((c * a + 255 * (255 - a)) / 255): 77, 255, 127, round(59525 / 255) = 233.
  const uint8_t expected[4] = {77, 255, 127, 233};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(rgb.at<cv::Vec3b>(i / 2, i % 2), cv::Vec3b(expected[i], expected[i], expected[i]))
        << i;
  }
  const cv::Mat grey = Decode(png, 1);
  ASSERT_EQ(grey.type(), CV_8UC1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(grey.at<uint8_t>(i / 2, i % 2), expected[i]) << i;
}

// ---- B06: a grey JPEG inside a colour dataset. ----

TEST(DecodeFieldCases, FieldCase_B06_GreyJpegDecodesToThreeEqualChannels) {
  const std::vector<std::string> files = {
      Encode(cv::Mat(8, 8, CV_8UC3, cv::Scalar(10, 120, 230)), ".jpg"),
      Encode(cv::Mat(8, 8, CV_8UC3, cv::Scalar(200, 30, 90)), ".jpg"),
      Encode(cv::Mat(8, 8, CV_8UC3, cv::Scalar(60, 60, 180)), ".jpg"),
      Encode(cv::Mat(8, 8, CV_8UC1, cv::Scalar(100)), ".jpg"),
  };
  // The last one really is a single-component JPEG: SOF0 component count 1.
  const std::string& grey_jpeg = files[3];
  const size_t sof = grey_jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  ASSERT_EQ(grey_jpeg[sof + 9], 1);

  for (DType dtype : {DType::kUint8, DType::kFloat32}) {
    PreprocessOptions options = Options(8, 8, 3, dtype, CropMode::kCenter);
    options.mean = {0.5f, 0.5f, 0.5f};
    options.std = {0.25f, 0.25f, 0.25f};
    std::vector<uint8_t> batch;  // 4 samples back to back, as a raw-tensor shard stores them.
    for (const std::string& file : files) {
      const cv::Mat image = Decode(file, 3);
      ASSERT_EQ(image.type(), CV_8UC3);
      ASSERT_EQ(image.size(), cv::Size(8, 8));
      const std::vector<uint8_t> sample = Tensor(image, options);
      batch.insert(batch.end(), sample.begin(), sample.end());
    }
    ASSERT_EQ(batch.size(), 4 * options.schema.sample_bytes());
    const uint8_t* grey = batch.data() + 3 * options.schema.sample_bytes();
    for (int i = 0; i < 64; ++i) {
      if (dtype == DType::kUint8) {
        EXPECT_NEAR(grey[3 * i], 100, 1);
        EXPECT_EQ(grey[3 * i], grey[3 * i + 1]);
        EXPECT_EQ(grey[3 * i], grey[3 * i + 2]);
      } else {
        float r, g, b;
        std::memcpy(&r, grey + 12 * i, 4);
        std::memcpy(&g, grey + 12 * i + 4, 4);
        std::memcpy(&b, grey + 12 * i + 8, 4);
        EXPECT_NEAR(r, (100 / 255.0 - 0.5) / 0.25, 1 / 255.0 / 0.25);
        EXPECT_EQ(r, g);  // Equal means and stds keep the channels equal.
        EXPECT_EQ(r, b);
      }
    }
  }
}

// ---- B13: smaller than the crop, extreme aspect ratios. ----

TEST(DecodeFieldCases, FieldCase_B13a_SmallerThanCropUpscalesOrNamesBothSizes) {
  cv::Mat image(229, 1024, CV_8UC3);
  for (int x = 0; x < 1024; ++x) image.col(x).setTo(cv::Scalar(x / 4, 100, 255 - x / 4));
  PreprocessOptions options = Options(256, 256, 3, DType::kUint8, CropMode::kCenter);
  // Default (resize_shorter 0): the smallest cover, 1144 x 256, then the centre 256 x 256.
  const std::vector<uint8_t> tensor = Tensor(image, options);
  ASSERT_EQ(tensor.size(), 256u * 256 * 3);
  // Centre column of the output is near source column 512 (value 128 in R).
  EXPECT_NEAR(tensor[(100 * 256 + 128) * 3], 128, 2);
  EXPECT_EQ(tensor[(100 * 256 + 128) * 3 + 1], 100);

  // Crop only (the shorter side kept at 229): an error naming the file and both sizes.
  options.resize_shorter = 229;
  std::vector<uint8_t> out(options.schema.sample_bytes());
  const Status status = Preprocess(image, options, "wide/a.jpg", out.data());
  ASSERT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("wide/a.jpg"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("1024 x 229"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("256 x 256"), std::string::npos) << status.message();
}

TEST(DecodeFieldCases, FieldCase_B13b_OnePixelImageBecomesUniform224) {
  const cv::Mat image(1, 1, CV_8UC3, cv::Scalar(10, 20, 30));
  PreprocessOptions options = Options(224, 224, 3, DType::kUint8, CropMode::kCenter);
  options.resize_shorter = 256;
  const std::vector<uint8_t> tensor = Tensor(image, options);
  ASSERT_EQ(tensor.size(), 224u * 224 * 3);
  for (size_t i = 0; i < tensor.size(); i += 3) {
    ASSERT_EQ(tensor[i], 10) << i;
    ASSERT_EQ(tensor[i + 1], 20) << i;
    ASSERT_EQ(tensor[i + 2], 30) << i;
  }
}

TEST(DecodeFieldCases, FieldCase_B13c_ExtremeAspectRatioRefusedBeforeAllocating) {
  const cv::Mat image(1, 10000, CV_8UC3, cv::Scalar(1, 2, 3));
  PreprocessOptions options = Options(224, 224, 3, DType::kUint8, CropMode::kCenter);
  options.resize_shorter = 256;
  std::vector<uint8_t> out(options.schema.sample_bytes());
  const Status status = Preprocess(image, options, "line/b.png", out.data());
  ASSERT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("line/b.png"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("2560000 x 256"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("exceeds the limit"), std::string::npos) << status.message();
  // Squashing without keeping the aspect ratio works and is bounded by the output size.
  options.crop = CropMode::kNone;
  ASSERT_TRUE(Preprocess(image, options, "line/b.png", out.data()).ok());
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out.back(), 3);
}

// ---- B14: huge images and decompression bombs. ----

std::string ZeroGreyPng(uint32_t width, uint32_t height) {
  return Png(width, height, 8, 0, "", ZlibZeros(uint64_t{height} * (width + 1)));
}

TEST(DecodeFieldCases, FieldCase_B14a_HugeGreyPngRefusedAtDefaultLimit) {
  // 30000 x 30000 zeros: a ~5.7 MB file that would decode to 900 MB. Only the refusal runs.
  const std::string png = ZeroGreyPng(30000, 30000);
  EXPECT_LT(png.size(), 8u << 20);
  const auto start = std::chrono::steady_clock::now();
  Result<cv::Mat> image = DecodeImage(png, "big/zeros.png", DecodeOptions());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(image.status().message(),
            "big/zeros.png: 30000 x 30000 = 900000000 pixels exceeds the limit of 178956970 "
            "(raise --max-pixels)");
  EXPECT_LT(seconds, 1.0);
}

TEST(DecodeFieldCases, FieldCase_B14a_LimitIsConfigurable) {
  // The same construction at 3000 x 3000 (9 MB decoded): refused under a lower limit,
  // decoded to zeros once the limit is raised.
  const std::string png = ZeroGreyPng(3000, 3000);
  DecodeOptions options;
  options.channels = 1;
  options.max_pixels = 1000000;
  Result<cv::Mat> refused = DecodeImage(png, "big/zeros3k.png", options);
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("3000 x 3000 = 9000000 pixels"), std::string::npos);
  options.max_pixels = 9000000;
  Result<cv::Mat> image = DecodeImage(png, "big/zeros3k.png", options);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->size(), cv::Size(3000, 3000));
  EXPECT_EQ(cv::countNonZero(*image), 0);
}

TEST(DecodeFieldCases, FieldCase_B14b_IhdrBombFailsFast) {
  // IHDR claims 100000 x 100000; IDAT holds 4 bytes of pixel data.
  const std::string png = Png(100000, 100000, 8, 0, "", ZlibStored(std::string(4, '\0')));
  ASSERT_LT(png.size(), 100u);
  {
    Result<cv::Mat> image = DecodeImage(png, "bomb.png", DecodeOptions());
    ASSERT_FALSE(image.ok());
    EXPECT_EQ(image.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(image.status().message().find("bomb.png: 100000 x 100000 = 10000000000 pixels"),
              std::string::npos)
        << image.status().message();
  }
  for (uint64_t limit : {uint64_t{0}, uint64_t{20000000000}}) {
    DecodeOptions options;
    options.max_pixels = limit;  // No kiln limit, or one above the claim.
    const auto start = std::chrono::steady_clock::now();
    Result<cv::Mat> image = DecodeImage(png, "bomb.png", options);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_FALSE(image.ok());
    EXPECT_EQ(image.status().code(), StatusCode::kCorruption);
    EXPECT_NE(image.status().message().find("bomb.png: truncated or invalid"), std::string::npos)
        << image.status().message();
    EXPECT_LT(seconds, 1.0);
  }
}

TEST(DecodeFieldCases, FieldCase_B14c_LargePhotoRefusedFromJpegHeader) {
  // A real JPEG whose frame header is patched to claim 20000 x 15000 (300 megapixels): the
  // refusal comes from the header alone, so nothing of that size is allocated.
  std::string jpeg = Encode(cv::Mat(16, 16, CV_8UC3, cv::Scalar(1, 2, 3)), ".jpg");
  const size_t sof = jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 5] = static_cast<char>(15000 >> 8);
  jpeg[sof + 6] = static_cast<char>(15000 & 0xFF);
  jpeg[sof + 7] = static_cast<char>(20000 >> 8);
  jpeg[sof + 8] = static_cast<char>(20000 & 0xFF);
  Result<cv::Mat> image = DecodeImage(jpeg, "photos/pano.jpg", DecodeOptions());
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(image.status().message(),
            "photos/pano.jpg: 20000 x 15000 = 300000000 pixels exceeds the limit of 178956970 "
            "(raise --max-pixels)");
}

// ---- B15: resize semantics. ----

TEST(DecodeFieldCases, FieldCase_B15_ThinLinesSurviveShrinking) {
  cv::Mat image(400, 400, CV_8UC1, cv::Scalar(0));
  for (int x = 0; x < 400; x += 4) image.col(x).setTo(255);
  for (CropMode crop : {CropMode::kNone, CropMode::kCenter}) {
    const std::vector<uint8_t> tensor = Tensor(image, Options(100, 100, 1, DType::kUint8, crop));
    for (size_t i = 0; i < tensor.size(); ++i) ASSERT_NEAR(tensor[i], 64, 1) << i;  // 255 / 4.
  }
  // The same through the colour path.
  cv::Mat rgb;
  cv::cvtColor(image, rgb, cv::COLOR_GRAY2RGB);
  const std::vector<uint8_t> tensor = Tensor(rgb, Options(100, 100, 3));
  for (size_t i = 0; i < tensor.size(); ++i) ASSERT_NEAR(tensor[i], 64, 1) << i;
}

TEST(DecodeFieldCases, FieldCase_B15_RampFollowsPixelCentreConvention) {
  // Value = column * 25. With pixel centres at i + 0.5, output column j covers input columns
  // 2j and 2j + 1, so its value is 50 j + 12.5.
  cv::Mat image(10, 10, CV_8UC1);
  for (int x = 0; x < 10; ++x) image.col(x).setTo(x * 25);
  const std::vector<uint8_t> tensor = Tensor(image, Options(5, 5, 1));
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 5; ++x) EXPECT_NEAR(tensor[y * 5 + x], 50 * x + 12.5, 1) << x;
  }
  // The decode path gives the same numbers as an in-memory image (PNG is lossless).
  const cv::Mat decoded = Decode(Encode(image, ".png"), 1);
  EXPECT_EQ(Tensor(decoded, Options(5, 5, 1)), tensor);
}

}  // namespace
}  // namespace kiln
