#include "tools/imaging/image_header.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <tuple>
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
  EXPECT_EQ(PeekImageSize(std::string("GIF89a\x03\x00\x03\x00", 10)).status().code(),
            StatusCode::kNotSupported);
  EXPECT_EQ(PeekImageSize("").status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(PeekImageSize("not an image").status().code(), StatusCode::kNotSupported);
}

// The size of files OpenCV wrote, in every header layout kiln parses besides PNG and JPEG.
TEST(PeekImageSize, BmpTiffWebpPnmSizesOfRealFiles) {
  const cv::Mat colour(23, 41, CV_8UC3, cv::Scalar(10, 20, 30));
  const cv::Mat grey(23, 41, CV_8UC1, cv::Scalar(7));
  struct Case {
    const char* ext;
    cv::Mat image;
    std::vector<int> params;
    ImageFormat format;
  };
  const std::vector<Case> cases = {
      {".bmp", colour, {}, ImageFormat::kBmp},
      {".bmp", grey, {}, ImageFormat::kBmp},
      {".tiff", colour, {}, ImageFormat::kTiff},
      {".tiff", cv::Mat(23, 41, CV_16UC1, cv::Scalar(300)), {}, ImageFormat::kTiff},
      {".webp", colour, {cv::IMWRITE_WEBP_QUALITY, 80}, ImageFormat::kWebp},   // VP8
      {".webp", colour, {cv::IMWRITE_WEBP_QUALITY, 101}, ImageFormat::kWebp},  // VP8L
      {".webp",
       cv::Mat(23, 41, CV_8UC4, cv::Scalar(1, 2, 3, 128)),
       {cv::IMWRITE_WEBP_QUALITY, 80},
       ImageFormat::kWebp},  // VP8X, for the alpha chunk
      {".ppm", colour, {}, ImageFormat::kPnm},
      {".pgm", grey, {}, ImageFormat::kPnm},
      {".pbm", grey, {}, ImageFormat::kPnm},
      {".ppm", colour, {cv::IMWRITE_PXM_BINARY, 0}, ImageFormat::kPnm},  // P3, ASCII
      {".pam", colour, {}, ImageFormat::kPnm},
  };
  for (const Case& c : cases) {
    const std::string bytes = Encode(c.image, c.ext, c.params);
    Result<ImageSize> size = PeekImageSize(bytes);
    ASSERT_TRUE(size.ok()) << c.ext << ": " << size.status().ToString();
    EXPECT_EQ(size->format, c.format) << c.ext;
    EXPECT_EQ(size->width, 41u) << c.ext;
    EXPECT_EQ(size->height, 23u) << c.ext;
  }
}

std::string Le32(uint32_t v) {
  return {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
          static_cast<char>(v >> 24)};
}

// Sizes written by hand: the layouts OpenCV's encoders do not produce.
TEST(PeekImageSize, HandWrittenHeaders) {
  // PNM: comments and any whitespace between the numbers; a PAM header.
  Result<ImageSize> pnm = PeekImageSize("P6 # made by hand\n 999999\t# w\n\n999998 255\n");
  ASSERT_TRUE(pnm.ok()) << pnm.status().ToString();
  EXPECT_EQ(pnm->width, 999999u);
  EXPECT_EQ(pnm->height, 999998u);
  Result<ImageSize> pam =
      PeekImageSize("P7\nHEIGHT 70000\nWIDTH 80000\nDEPTH 3\nMAXVAL 255\nENDHDR\n");
  ASSERT_TRUE(pam.ok()) << pam.status().ToString();
  EXPECT_EQ(pam->width, 80000u);
  EXPECT_EQ(pam->height, 70000u);
  // BMP: a top-down 40-byte header (negative height) and an OS/2 12-byte core header.
  const std::string bmp = "BM" + std::string(12, '\0') + Le32(40) + Le32(300000) +
                          Le32(static_cast<uint32_t>(-200000)) + std::string(20, '\0');
  Result<ImageSize> top_down = PeekImageSize(bmp);
  ASSERT_TRUE(top_down.ok()) << top_down.status().ToString();
  EXPECT_EQ(top_down->width, 300000u);
  EXPECT_EQ(top_down->height, 200000u);
  const std::string core = "BM" + std::string(12, '\0') + Le32(12) + "\x10\x27\x20\x4e";
  Result<ImageSize> os2 = PeekImageSize(core);
  ASSERT_TRUE(os2.ok()) << os2.status().ToString();
  EXPECT_EQ(os2->width, 10000u);
  EXPECT_EQ(os2->height, 20000u);
  // Big-endian TIFF with LONG sizes.
  const std::string tiff = std::string("MM\0*", 4) + Be32(8) + std::string("\x00\x02", 2) +
                           std::string("\x01\x00\x00\x04", 4) + Be32(1) + Be32(123456) +
                           std::string("\x01\x01\x00\x04", 4) + Be32(1) + Be32(654321) + Be32(0);
  Result<ImageSize> mm = PeekImageSize(tiff);
  ASSERT_TRUE(mm.ok()) << mm.status().ToString();
  EXPECT_EQ(mm->width, 123456u);
  EXPECT_EQ(mm->height, 654321u);
  // WebP VP8X canvas: 24-bit sizes minus one.
  const std::string vp8x = "RIFF" + Le32(22) + "WEBPVP8X" + Le32(10) + Le32(0) +
                           std::string("\x3f\x42\x0f", 3) + std::string("\x9f\x86\x01", 3);
  Result<ImageSize> canvas = PeekImageSize(vp8x);
  ASSERT_TRUE(canvas.ok()) << canvas.status().ToString();
  EXPECT_EQ(canvas->width, 1000000u);
  EXPECT_EQ(canvas->height, 100000u);
}

// Every header cut short, at every length, or with garbage where the size is: Corruption with
// the format's name, never a crash or a size read past the end.
TEST(PeekImageSize, BmpTiffWebpPnmHeadersCutShortOrGarbled) {
  const cv::Mat colour(23, 41, CV_8UC3, cv::Scalar(10, 20, 30));
  // The bytes up to the size: "P6\n41 2" already reads as a 41 x 2 PPM.
  for (const auto& [ext, name, header_bytes] :
       std::vector<std::tuple<std::string, std::string, size_t>>{
           {".bmp", "BMP", 26}, {".webp", "WebP", 25}, {".ppm", "PNM", 7}, {".pam", "PAM", 0}}) {
    const std::string bytes = Encode(colour, ext);
    if (ext == ".pam") {
      ASSERT_EQ(bytes.substr(0, 3), "P7\n");
      // Any cut before the end of ENDHDR; a cut inside "WIDTH 41" names the PNM number.
      const size_t end = bytes.find("ENDHDR") + 6;
      for (size_t n = 2; n < end; ++n) {
        Result<ImageSize> size = PeekImageSize(bytes.substr(0, n));
        ASSERT_EQ(size.status().code(), StatusCode::kCorruption) << "cut at " << n;
        EXPECT_NE(size.status().message().find("header ends at offset"), std::string::npos)
            << size.status().message();
      }
      continue;
    }
    for (size_t n = 2; n < header_bytes; ++n) {
      if (ext == ".webp" && n < 12) continue;  // Not sniffed as WebP before "WEBP" at 8..11.
      Result<ImageSize> size = PeekImageSize(bytes.substr(0, n));
      ASSERT_FALSE(size.ok()) << ext << " cut at " << n;
      EXPECT_EQ(size.status().code(), StatusCode::kCorruption) << ext << " cut at " << n;
      EXPECT_NE(size.status().message().find(name), std::string::npos) << size.status().message();
    }
  }
  const std::string tiff = Encode(colour, ".tiff");
  Result<ImageSize> cut = PeekImageSize(tiff.substr(0, 6));
  EXPECT_EQ(cut.status().code(), StatusCode::kCorruption);
  // IFD0 offset past the end.
  Result<ImageSize> past = PeekImageSize(std::string("II*\0", 4) + Le32(4000) + "xx");
  EXPECT_EQ(past.status().code(), StatusCode::kCorruption);
  EXPECT_NE(past.status().message().find("TIFF IFD0 offset 4000 is past the end"),
            std::string::npos)
      << past.status().message();
  // An IFD without ImageLength.
  const std::string no_height = std::string("II*\0", 4) + Le32(8) + std::string("\x01\x00", 2) +
                                std::string("\x00\x01\x03\x00", 4) + Le32(1) + Le32(5) + Le32(0);
  EXPECT_NE(PeekImageSize(no_height).status().message().find("no ImageLength (257)"),
            std::string::npos);

  const Status letters = PeekImageSize("P6\nabc def\n255\n").status();
  EXPECT_EQ(letters.code(), StatusCode::kCorruption);
  EXPECT_EQ(letters.message(), "PNM header has byte 0x61 at offset 3 where its width should be");
  const Status huge = PeekImageSize("P5 99999999999 2 255\n").status();
  EXPECT_EQ(huge.message(), "PNM width at offset 3 is over 4294967295");
  const Status zero = PeekImageSize("P5 0 2 255\n").status();
  EXPECT_EQ(zero.message(), "PNM header claims a size of 0 x 2");
  const Status chunk = PeekImageSize("RIFF" + Le32(20) + "WEBPJUNK" + Le32(8)).status();
  EXPECT_EQ(chunk.message(),
            "WebP has chunk 'JUNK' at offset 12 where VP8, VP8L or VP8X should be");
}

}  // namespace
}  // namespace kiln
