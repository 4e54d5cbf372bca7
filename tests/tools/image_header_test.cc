#include "tools/image_header.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace kiln {
namespace {

std::string Be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

// PNG signature + IHDR (CRC left zero: PeekImageSize does not check CRCs) + optional rest.
std::string PngHeader(uint32_t width, uint32_t height, int bit_depth, int color_type,
                      int interlace = 0) {
  std::string out("\x89PNG\r\n\x1a\n", 8);
  out += Be32(13) + "IHDR" + Be32(width) + Be32(height);
  out += static_cast<char>(bit_depth);
  out += static_cast<char>(color_type);
  out += std::string(2, '\0');
  out += static_cast<char>(interlace);
  out += Be32(0);
  return out;
}

std::string Chunk(const std::string& type, const std::string& data) {
  return Be32(static_cast<uint32_t>(data.size())) + type + data + Be32(0);
}

std::string Encode(const cv::Mat& image, const std::string& ext, std::vector<int> params = {}) {
  std::vector<uchar> buffer;
  EXPECT_TRUE(cv::imencode(ext, image, buffer, params));
  return std::string(buffer.begin(), buffer.end());
}

using ::kiln::testing::ReadTestInput;

TEST(SniffImageFormat, RecognisesMagicNumbers) {
  EXPECT_EQ(SniffImageFormat("\xFF\xD8\xFF\xE0"), ImageFormat::kJpeg);
  EXPECT_EQ(SniffImageFormat(std::string("\x89PNG\r\n\x1a\n", 8)), ImageFormat::kPng);
  EXPECT_EQ(SniffImageFormat("BM...."), ImageFormat::kBmp);
  EXPECT_EQ(SniffImageFormat("GIF89a"), ImageFormat::kGif);
  EXPECT_EQ(SniffImageFormat(std::string("II*\0", 4)), ImageFormat::kTiff);
  EXPECT_EQ(SniffImageFormat(std::string("MM\0*", 4)), ImageFormat::kTiff);
  EXPECT_EQ(SniffImageFormat(std::string("RIFF\x10\0\0\0WEBPVP8 ", 16)), ImageFormat::kWebp);
  EXPECT_EQ(SniffImageFormat("P6\n2 2\n255\n"), ImageFormat::kPnm);
  EXPECT_EQ(SniffImageFormat("#?RADIANCE\n"), ImageFormat::kFloat);
  EXPECT_EQ(SniffImageFormat("#?RGBE\n"), ImageFormat::kFloat);
  EXPECT_EQ(SniffImageFormat("PF\n2 2\n-1.0\n"), ImageFormat::kFloat);
  EXPECT_EQ(SniffImageFormat("Pf\n2 2\n-1.0\n"), ImageFormat::kFloat);
  EXPECT_EQ(SniffImageFormat(std::string("\x76\x2F\x31\x01", 4)), ImageFormat::kFloat);
  EXPECT_EQ(SniffImageFormat(std::string("\0\0\0\x0CjP  \r\n\x87\n", 12)),
            ImageFormat::kOther);  // JPEG 2000
  EXPECT_EQ(SniffImageFormat("hello, world"), ImageFormat::kUnknown);
  EXPECT_EQ(SniffImageFormat(""), ImageFormat::kUnknown);
  EXPECT_EQ(SniffImageFormat("\xFF\xD8"), ImageFormat::kUnknown);  // Too short for JPEG.
  EXPECT_EQ(ImageFormatName(ImageFormat::kPng), "png");
  EXPECT_EQ(ImageFormatName(ImageFormat::kUnknown), "unknown");
  EXPECT_EQ(ImageFormatName(ImageFormat::kFloat), "float");
}

TEST(PeekImageSize, PngFromOpenCv) {
  const std::string png = Encode(cv::Mat(5, 7, CV_8UC3, cv::Scalar(1, 2, 3)), ".png");
  Result<ImageSize> size = PeekImageSize(png);
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(size->format, ImageFormat::kPng);
  EXPECT_EQ(size->width, 7u);
  EXPECT_EQ(size->height, 5u);
  EXPECT_EQ(size->pixels(), 35u);
  EXPECT_EQ(size->png_inflated_bytes, 5u * (1 + 7 * 3));
  EXPECT_GT(size->png_idat_bytes, 0u);
  EXPECT_LT(size->png_idat_bytes, png.size());
}

TEST(PeekImageSize, PngInflatedBytesPerPixelFormat) {
  struct Case {
    int bit_depth, color_type;
    uint64_t expected;  // For 10 x 3.
  };
  const Case cases[] = {
      {1, 0, 3 * (1 + 2)},   {2, 0, 3 * (1 + 3)},  {4, 0, 3 * (1 + 5)},   {8, 0, 3 * (1 + 10)},
      {16, 0, 3 * (1 + 20)}, {8, 2, 3 * (1 + 30)}, {16, 2, 3 * (1 + 60)}, {1, 3, 3 * (1 + 2)},
      {8, 3, 3 * (1 + 10)},  {8, 4, 3 * (1 + 20)}, {16, 4, 3 * (1 + 40)}, {8, 6, 3 * (1 + 40)},
      {16, 6, 3 * (1 + 80)},
  };
  for (const Case& c : cases) {
    Result<ImageSize> size = PeekImageSize(PngHeader(10, 3, c.bit_depth, c.color_type));
    ASSERT_TRUE(size.ok()) << c.bit_depth << "/" << c.color_type;
    EXPECT_EQ(size->png_inflated_bytes, c.expected) << c.bit_depth << "/" << c.color_type;
  }
}

TEST(PeekImageSize, PngAdam7InterlacedSize) {
  // 8 x 8 grey: passes are 1x1, 1x1, 2x1, 2x2, 4x2, 4x4, 8x4 pixels, each row with a filter byte.
  Result<ImageSize> size = PeekImageSize(PngHeader(8, 8, 8, 0, 1));
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(size->png_inflated_bytes, 2u + 2 + 3 + 6 + 10 + 20 + 36);
  // 1 x 1: only the first pass is non-empty.
  size = PeekImageSize(PngHeader(1, 1, 8, 0, 1));
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(size->png_inflated_bytes, 2u);
}

TEST(PeekImageSize, PngSumsIdatChunksAndStopsAtIend) {
  std::string png = PngHeader(4, 4, 8, 0) + Chunk("IDAT", std::string(10, 'x')) +
                    Chunk("tEXt", "a\0b") + Chunk("IDAT", std::string(7, 'y')) + Chunk("IEND", "") +
                    Chunk("IDAT", std::string(100, 'z'));
  Result<ImageSize> size = PeekImageSize(png);
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(size->png_idat_bytes, 17u);
  // A chunk cut short counts only the bytes present.
  png = PngHeader(4, 4, 8, 0) + Be32(1000) + "IDAT" + std::string(30, 'x');
  size = PeekImageSize(png);
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(size->png_idat_bytes, 30u);
}

TEST(PeekImageSize, PngHugeClaimIsReadNotAllocated) {
  Result<ImageSize> size = PeekImageSize(PngHeader(100000, 100000, 8, 0));
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(size->pixels(), 10000000000u);
  EXPECT_EQ(size->png_inflated_bytes, uint64_t{100000} * 100001);
  EXPECT_EQ(size->png_idat_bytes, 0u);
}

TEST(PeekImageSize, PngHeaderErrors) {
  const std::string good = PngHeader(4, 4, 8, 0);
  EXPECT_EQ(PeekImageSize(good.substr(0, 20)).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(PeekImageSize(PngHeader(0, 4, 8, 0)).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(PeekImageSize(PngHeader(4, 0, 8, 0)).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(PeekImageSize(PngHeader(0x80000000u, 4, 8, 0)).status().code(),
            StatusCode::kCorruption);
  EXPECT_EQ(PeekImageSize(PngHeader(4, 4, 16, 3)).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(PeekImageSize(PngHeader(4, 4, 4, 2)).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(PeekImageSize(PngHeader(4, 4, 8, 5)).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(PeekImageSize(PngHeader(4, 4, 8, 0, 2)).status().code(), StatusCode::kCorruption);
  std::string not_ihdr = good;
  not_ihdr.replace(12, 4, "IDAT");
  const Status status = PeekImageSize(not_ihdr).status();
  EXPECT_EQ(status.code(), StatusCode::kCorruption);
  EXPECT_NE(status.message().find("IHDR"), std::string::npos);
}

TEST(PeekImageSize, JpegFromOpenCv) {
  for (bool progressive : {false, true}) {
    const std::string jpeg = Encode(cv::Mat(17, 33, CV_8UC3, cv::Scalar(9, 99, 199)), ".jpg",
                                    {cv::IMWRITE_JPEG_PROGRESSIVE, progressive ? 1 : 0});
    Result<ImageSize> size = PeekImageSize(jpeg);
    ASSERT_TRUE(size.ok()) << size.status().ToString();
    EXPECT_EQ(size->format, ImageFormat::kJpeg);
    EXPECT_EQ(size->width, 33u);
    EXPECT_EQ(size->height, 17u);
    EXPECT_TRUE(size->jpeg_has_end_marker);
    // Trailing junk after EOI is tolerated.
    size = PeekImageSize(jpeg + "junk");
    ASSERT_TRUE(size.ok());
    EXPECT_TRUE(size->jpeg_has_end_marker);
    // Cut inside the scan data: the size is still known, the end marker is missing.
    size = PeekImageSize(jpeg.substr(0, jpeg.size() - 2));
    ASSERT_TRUE(size.ok());
    EXPECT_EQ(size->width, 33u);
    EXPECT_FALSE(size->jpeg_has_end_marker);
  }
}

TEST(PeekImageSize, RealJpegFiles) {
  const std::string dir = "/usr/share/go-1.19/src/image/testdata/";
  for (const char* name : {"video-001.jpeg", "video-001.progressive.jpeg", "video-001.cmyk.jpeg",
                           "video-005.gray.jpeg", "video-001.q50.410.jpeg",
                           "video-001.separate.dc.progression.progressive.jpeg"}) {
    Result<ImageSize> size = PeekImageSize(ReadTestInput(dir + name));
    ASSERT_TRUE(size.ok()) << name << ": " << size.status().ToString();
    EXPECT_EQ(size->width, 150u) << name;
    EXPECT_EQ(size->height, 103u) << name;
    EXPECT_TRUE(size->jpeg_has_end_marker) << name;
  }
}

TEST(PeekImageSize, JpegHeaderErrors) {
  // SOI then SOS without a frame header.
  EXPECT_EQ(PeekImageSize(std::string("\xFF\xD8\xFF\xDA\x00\x02", 6)).status().code(),
            StatusCode::kCorruption);
  // Segment length past the end.
  EXPECT_EQ(PeekImageSize(std::string("\xFF\xD8\xFF\xE0\x10\x00JFIF", 10)).status().code(),
            StatusCode::kCorruption);
  // Ends before any scan.
  EXPECT_EQ(PeekImageSize(std::string("\xFF\xD8\xFF\xE0\x00\x04zz", 8)).status().code(),
            StatusCode::kCorruption);
  // A byte that is not a marker where one must be.
  EXPECT_EQ(PeekImageSize(std::string("\xFF\xD8\xFF\xE0\x00\x02\x12\x34", 8)).status().code(),
            StatusCode::kCorruption);
  // EOI before the scan.
  const Status eoi = PeekImageSize(std::string("\xFF\xD8\xFF\xD9", 4)).status();
  EXPECT_EQ(eoi.code(), StatusCode::kCorruption);
  EXPECT_NE(eoi.message().find("FF D9"), std::string::npos) << eoi.message();
  // Height 0 (defined later by DNL) is left to OpenCV.
  std::string jpeg = Encode(cv::Mat(8, 8, CV_8UC1, cv::Scalar(5)), ".jpg");
  const size_t sof = jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 5] = 0;
  jpeg[sof + 6] = 0;
  EXPECT_EQ(PeekImageSize(jpeg).status().code(), StatusCode::kNotSupported);
}

TEST(PeekImageSize, OtherFormatsAreNotSupported) {
  const cv::Mat image(3, 3, CV_8UC3, cv::Scalar(0, 0, 0));
  EXPECT_EQ(PeekImageSize(Encode(image, ".bmp")).status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(PeekImageSize(Encode(image, ".ppm")).status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(PeekImageSize("").status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(PeekImageSize("not an image").status().code(), StatusCode::kNotSupported);
}

}  // namespace
}  // namespace kiln
