#include "tools/imaging/image_decoder.h"

#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace kiln {
namespace {

const char kGoImageData[] = "/usr/share/go-1.19/src/image/testdata/";
const char kGoPngData[] = "/usr/share/go-1.19/src/image/png/testdata/";
const char kPngSuite[] = "/usr/share/go-1.19/src/image/png/testdata/pngsuite/";

using ::kiln::testing::ReadTestInput;

std::string Encode(const cv::Mat& image, const std::string& ext, std::vector<int> params = {}) {
  std::vector<uchar> buffer;
  EXPECT_TRUE(cv::imencode(ext, image, buffer, params));
  return std::string(buffer.begin(), buffer.end());
}

DecodeOptions Channels(uint32_t channels) {
  DecodeOptions options;
  options.channels = channels;
  return options;
}

TEST(DecodeImage, ReturnsRgbOrder) {
  // BGR (0, 0, 255) is pure red for OpenCV; kiln returns it as R, G, B = 255, 0, 0.
  const cv::Mat red(2, 3, CV_8UC3, cv::Scalar(0, 0, 255));
  for (const char* ext : {".png", ".bmp", ".ppm", ".tiff", ".webp"}) {
    std::vector<int> params;
    if (std::string(ext) == ".webp") params = {cv::IMWRITE_WEBP_QUALITY, 101};  // Lossless.
    Result<cv::Mat> image = DecodeImage(Encode(red, ext, params), ext, DecodeOptions());
    ASSERT_TRUE(image.ok()) << ext << ": " << image.status().ToString();
    EXPECT_EQ(image->type(), CV_8UC3) << ext;
    EXPECT_EQ(image->size(), cv::Size(3, 2)) << ext;
    EXPECT_TRUE(image->isContinuous());
    EXPECT_EQ(image->at<cv::Vec3b>(1, 2), cv::Vec3b(255, 0, 0)) << ext;
  }
}

TEST(DecodeImage, GreyReplicatedAndColourToGreyWithBt601) {
  const cv::Mat grey(4, 4, CV_8UC1, cv::Scalar(77));
  Result<cv::Mat> rgb = DecodeImage(Encode(grey, ".png"), "g.png", Channels(3));
  ASSERT_TRUE(rgb.ok());
  EXPECT_EQ(rgb->at<cv::Vec3b>(3, 3), cv::Vec3b(77, 77, 77));
  Result<cv::Mat> one = DecodeImage(Encode(grey, ".png"), "g.png", Channels(1));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->type(), CV_8UC1);
  EXPECT_EQ(one->at<uint8_t>(0, 0), 77);

  // R = 200, G = 100, B = 50: 0.299 * 200 + 0.587 * 100 + 0.114 * 50 = 124.2 -> 124.
  const cv::Mat colour(2, 2, CV_8UC3, cv::Scalar(50, 100, 200));
  for (const char* ext : {".png", ".bmp"}) {
    Result<cv::Mat> g = DecodeImage(Encode(colour, ext), ext, Channels(1));
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g->type(), CV_8UC1);
    EXPECT_EQ(g->at<uint8_t>(1, 1), 124) << ext;
  }
  // A colour JPEG asked for as grey goes through the same conversion (within JPEG error).
  Result<cv::Mat> g =
      DecodeImage(Encode(colour, ".jpg", {cv::IMWRITE_JPEG_QUALITY, 100}), "c.jpg", Channels(1));
  ASSERT_TRUE(g.ok());
  EXPECT_NEAR(g->at<uint8_t>(1, 1), 124, 2);
}

TEST(DecodeImage, SixteenBitScalingIsRoundedDivisionBy257ForEveryValue) {
  cv::Mat all(256, 256, CV_16UC1);
  for (int v = 0; v < 65536; ++v) all.at<uint16_t>(v / 256, v % 256) = static_cast<uint16_t>(v);
  Result<cv::Mat> image = DecodeImage(Encode(all, ".png"), "all16.png", Channels(1));
  ASSERT_TRUE(image.ok());
  ASSERT_EQ(image->type(), CV_8UC1);
  for (int v = 0; v < 65536; ++v) {
    ASSERT_EQ(image->at<uint8_t>(v / 256, v % 256), (v * 255 + 32767) / 65535) << v;
  }
  // 16-bit colour (and 16-bit TIFF) take the same path.
  cv::Mat colour(1, 1, CV_16UC3, cv::Scalar(0x0101, 0x8080, 0xFEFF));  // B, G, R.
  for (const char* ext : {".png", ".tiff"}) {
    Result<cv::Mat> c = DecodeImage(Encode(colour, ext), ext, Channels(3));
    ASSERT_TRUE(c.ok()) << ext;
    EXPECT_EQ(c->at<cv::Vec3b>(0, 0), cv::Vec3b(254, 128, 1)) << ext;  // R, G, B.
  }
}

TEST(DecodeImage, AlphaCompositedOverBackgroundWithRounding) {
  // BGRA: colour (R 200, G 100, B 0) at alpha 100.
  const cv::Mat bgra(1, 1, CV_8UC4, cv::Scalar(0, 100, 200, 100));
  for (int background : {255, 0, 128}) {
    DecodeOptions options;
    options.background = static_cast<uint8_t>(background);
    Result<cv::Mat> image = DecodeImage(Encode(bgra, ".png"), "a.png", options);
    ASSERT_TRUE(image.ok());
    auto blend = [background](int c) { return (c * 100 + background * 155 + 127) / 255; };
    EXPECT_EQ(image->at<cv::Vec3b>(0, 0), cv::Vec3b(blend(200), blend(100), blend(0)))
        << background;
  }
}

TEST(DecodeImage, CmykJpegConvertedByTheDecoder) {
  // Go's twin PNG holds the expected decode of the CMYK JPEG.
  const std::string dir = kGoImageData;
  Result<cv::Mat> cmyk =
      DecodeImage(ReadTestInput(dir + "video-001.cmyk.jpeg"), "cmyk.jpeg", DecodeOptions());
  Result<cv::Mat> twin =
      DecodeImage(ReadTestInput(dir + "video-001.cmyk.png"), "cmyk.png", DecodeOptions());
  ASSERT_TRUE(cmyk.ok()) << cmyk.status().ToString();
  ASSERT_TRUE(twin.ok());
  ASSERT_EQ(cmyk->type(), CV_8UC3);
  ASSERT_EQ(cmyk->size(), twin->size());
  cv::Mat diff;
  cv::absdiff(*cmyk, *twin, diff);
  const cv::Scalar mean = cv::mean(diff);
  EXPECT_LT((mean[0] + mean[1] + mean[2]) / 3, 4.0);
}

TEST(DecodeImage, RealJpegVariantsMatchTheirPngTwins) {
  const std::string dir = kGoImageData;
  for (const char* name : {"video-001", "video-001.progressive", "video-005.gray",
                           "video-001.221212", "video-001.rgb"}) {
    SCOPED_TRACE(name);
    Result<cv::Mat> jpeg = DecodeImage(ReadTestInput(dir + name + ".jpeg"),
                                       std::string(name) + ".jpeg", DecodeOptions());
    const std::string png_name =
        std::string(name == std::string("video-001.progressive") ? "video-001" : name) + ".png";
    Result<cv::Mat> png = DecodeImage(ReadTestInput(dir + png_name), png_name, DecodeOptions());
    ASSERT_TRUE(jpeg.ok()) << jpeg.status().ToString();
    ASSERT_TRUE(png.ok()) << png.status().ToString();
    ASSERT_EQ(jpeg->size(), png->size());
    cv::Mat diff;
    cv::absdiff(*jpeg, *png, diff);
    const cv::Scalar mean = cv::mean(diff);
    // Go's decoder (which made the twins) rounds its IDCT and chroma upsampling differently.
    EXPECT_LT((mean[0] + mean[1] + mean[2]) / 3, 6.0);
  }
}

TEST(DecodeImage, EveryPngSuiteFileDecodesToUpright8Bit) {
  DIR* dir = opendir(kPngSuite);
  ASSERT_NE(dir, nullptr) << kPngSuite;
  std::vector<std::string> names;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.size() > 4 && name.substr(name.size() - 4) == ".png") names.push_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  ASSERT_GE(names.size(), 30u);
  for (const std::string& name : names) {
    const std::string bytes = ReadTestInput(kPngSuite + name);
    for (uint32_t channels : {1u, 3u}) {
      Result<cv::Mat> image = DecodeImage(bytes, name, Channels(channels));
      ASSERT_TRUE(image.ok()) << name << ": " << image.status().ToString();
      EXPECT_EQ(image->type(), channels == 1 ? CV_8UC1 : CV_8UC3) << name;
      // Same size as the IHDR says (most are 32 x 32, some 29..31).
      auto be32 = [&bytes](size_t pos) {
        return (static_cast<unsigned char>(bytes[pos]) << 24) |
               (static_cast<unsigned char>(bytes[pos + 1]) << 16) |
               (static_cast<unsigned char>(bytes[pos + 2]) << 8) |
               static_cast<unsigned char>(bytes[pos + 3]);
      };
      EXPECT_EQ(image->size(), cv::Size(be32(16), be32(20))) << name;
    }
  }
}

TEST(DecodeImage, PngSuiteTransparencyBecomesBackground) {
  // basn3p08-trns: palette with tRNS; basn4a08: grey + alpha; basn6a08: RGBA. Each has
  // (nearly) transparent pixels; over two backgrounds those pixels differ by ~255.
  for (const char* name : {"basn3p08-trns.png", "basn4a08.png", "basn6a08.png", "basn4a16.png",
                           "basn6a16.png", "ftbwn3p08.png", "ftbbn3p08.png", "ftbrn2c08.png"}) {
    const std::string bytes = ReadTestInput(std::string(kPngSuite) + name);
    DecodeOptions white, black;
    black.background = 0;
    Result<cv::Mat> on_white = DecodeImage(bytes, name, white);
    Result<cv::Mat> on_black = DecodeImage(bytes, name, black);
    ASSERT_TRUE(on_white.ok() && on_black.ok()) << name;
    cv::Mat diff;
    cv::absdiff(*on_white, *on_black, diff);
    double max_diff = 0;
    cv::minMaxLoc(diff.reshape(1), nullptr, &max_diff);
    // Some pixels are (nearly) transparent: basn3p08-trns's lowest palette alpha is 4.
    EXPECT_GE(max_diff, 250) << name;
    // Where white shows through, the whole pixel is (255, 255, 255).
    for (int y = 0; y < 32; ++y) {
      for (int x = 0; x < 32; ++x) {
        const cv::Vec3b d = diff.at<cv::Vec3b>(y, x);
        if (d[0] == 255) {
          EXPECT_EQ(on_white->at<cv::Vec3b>(y, x), cv::Vec3b(255, 255, 255));
        }
      }
    }
  }
}

TEST(DecodeImage, GreyPngTrnsKeyIsNotComposited) {
  // Documented limitation: OpenCV 4.6 drops a grey PNG's tRNS colour key, so the background
  // option has no effect on ftbbn0g04.png (grey 4-bit with one transparent level).
  const std::string bytes = ReadTestInput(std::string(kPngSuite) + "ftbbn0g04.png");
  DecodeOptions white, black;
  black.background = 0;
  Result<cv::Mat> on_white = DecodeImage(bytes, "g", white);
  Result<cv::Mat> on_black = DecodeImage(bytes, "g", black);
  ASSERT_TRUE(on_white.ok() && on_black.ok());
  EXPECT_EQ(cv::norm(*on_white, *on_black, cv::NORM_INF), 0);
}

TEST(DecodeImage, EmptyAndNotAnImage) {
  Result<cv::Mat> empty = DecodeImage("", "dir/c.jpg", DecodeOptions());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.status().message(), "dir/c.jpg: empty file");

  Result<cv::Mat> text = DecodeImage("0123456789", "dir/c.jpg", DecodeOptions());
  EXPECT_EQ(text.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(text.status().message(), "dir/c.jpg: not an image");
}

// An error names the file in a field of its own (Status::location) and keeps the bare reason,
// which the packer's rejections and rejected.tsv report beside the path.
TEST(DecodeImage, ErrorsNameTheFileInTheLocationAndKeepTheBareReason) {
  struct Case {
    const char* name;
    std::string bytes;
    const char* reason_start;
  };
  std::string jpeg = Encode(cv::Mat(30, 40, CV_8UC3, cv::Scalar(1, 2, 3)), ".jpg");
  const size_t sof = jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 4] = 0x0C;  // sample precision 12: not this libjpeg's
  const Case cases[] = {
      {"empty", "", "empty file"},
      {"text", "0123456789", "not an image"},
      // Decoded by DecodeJpeg, the error passes through DecodeImage with the file named once.
      {"jpeg_12_bit", jpeg, "truncated or invalid (libjpeg: "},
      // Decoded by the first-frame decoder.
      {"gif_cut", "GIF89a\x10", "truncated or invalid (giflib: "},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<cv::Mat> r = DecodeImage(c.bytes, "dir/c.jpg", DecodeOptions());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().location(), ErrorLocation{"dir/c.jpg"});
    EXPECT_EQ(r.status().reason().rfind(c.reason_start, 0), 0u) << r.status().reason();
    EXPECT_EQ(r.status().reason().find("dir/c.jpg"), std::string::npos) << r.status().reason();
    EXPECT_EQ(r.status().message(), "dir/c.jpg: " + std::string(r.status().reason()));
  }
  // An empty path attaches nothing: the message is the bare reason.
  Result<cv::Mat> unnamed = DecodeImage("0123456789", "", DecodeOptions());
  EXPECT_EQ(unnamed.status().message(), "not an image");
  EXPECT_TRUE(unnamed.status().location().empty());
}

// Fuzz finding F8 (tests/fuzz/README.md): 133 bytes that start almost like a PNG and carry
// "DICM" at offset 128 went to OpenCV's DICOM decoder, whose GDCM library aborted the process
// (an assertion); damaged PFM files left OpenCV temporary files in /tmp. Neither reaches
// OpenCV now, and the answers name the file.
TEST(DecodeImage, FuzzFindingF8_UnknownAndFloatFormatsNeverReachOpenCv) {
  std::string dicom(133, '\0');
  dicom.replace(0, 6, "\x89PNG\r\n");
  dicom.replace(128, 4, "DICM");
  Result<cv::Mat> d = DecodeImage(dicom, "dir/scan.png", DecodeOptions());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(d.status().message(), "dir/scan.png: not an image");

  for (const std::string& bytes :
       {std::string("PF\n=\r  1 1\n-1.0\n"), std::string("Pf\n1 1\n-1.0\nabcd"),
        std::string("\x76\x2F\x31\x01\x02\0\0\0", 8), std::string("#?RADIANCE\n"),
        std::string("#?RGBE\n")}) {
    Result<cv::Mat> r = DecodeImage(bytes, "dir/f.img", DecodeOptions());
    ASSERT_FALSE(r.ok()) << bytes;
    EXPECT_EQ(r.status().code(), StatusCode::kNotSupported) << bytes;
    EXPECT_EQ(r.status().message().rfind("dir/f.img: floating-point samples", 0), 0u)
        << r.status().message();
  }
  // A float image OpenCV itself writes is refused the same way, not decoded.
  const cv::Mat pixels(2, 3, CV_32FC3, cv::Scalar(0.25, 0.5, 1.0));
  Result<cv::Mat> pfm = DecodeImage(Encode(pixels, ".pfm"), "dir/g.pfm", DecodeOptions());
  ASSERT_FALSE(pfm.ok());
  EXPECT_EQ(pfm.status().code(), StatusCode::kNotSupported);
}

TEST(DecodeImage, TruncatedFilesAreErrorsNeverEmptyImages) {
  const cv::Mat image(40, 40, CV_8UC3, cv::Scalar(10, 20, 30));
  for (const char* ext : {".png", ".jpg", ".bmp", ".webp", ".tiff"}) {
    const std::string bytes = Encode(image, ext);
    for (size_t keep : {size_t{12}, bytes.size() / 2}) {
      Result<cv::Mat> decoded =
          DecodeImage(bytes.substr(0, keep), std::string("t") + ext, DecodeOptions());
      ASSERT_FALSE(decoded.ok()) << ext << " cut to " << keep;
      EXPECT_EQ(decoded.status().code(), StatusCode::kCorruption) << ext;
      EXPECT_NE(decoded.status().message().find(std::string("t") + ext + ": truncated or invalid"),
                std::string::npos)
          << decoded.status().message();
    }
  }
}

TEST(DecodeImage, GoInvalidPngFiles) {
  // invalid-crc32.png is readable by lenient decoders; the others must fail with a message.
  for (const char* name : {"invalid-trunc.png", "invalid-zlib.png", "invalid-noend.png",
                           "invalid-palette.png", "invalid-crc32.png"}) {
    Result<cv::Mat> image =
        DecodeImage(ReadTestInput(std::string(kGoPngData) + name), name, DecodeOptions());
    if (image.ok()) {
      EXPECT_FALSE(image->empty()) << name;
      EXPECT_EQ(image->type(), CV_8UC3) << name;
    } else {
      EXPECT_EQ(image.status().code(), StatusCode::kCorruption) << name;
      EXPECT_EQ(image.status().message().rfind(std::string(name) + ": ", 0), 0u)
          << image.status().message();
    }
  }
  EXPECT_FALSE(DecodeImage(ReadTestInput(std::string(kGoPngData) + "invalid-trunc.png"), "x",
                           DecodeOptions())
                   .ok());
}

TEST(DecodeImage, PixelLimitAppliesToEveryFormat) {
  const cv::Mat image(30, 40, CV_8UC3, cv::Scalar(1, 2, 3));
  for (const char* ext : {".png", ".jpg", ".bmp", ".ppm", ".tiff"}) {
    DecodeOptions options;
    options.max_pixels = 1199;
    Result<cv::Mat> refused = DecodeImage(Encode(image, ext), "x", options);
    ASSERT_FALSE(refused.ok()) << ext;
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(refused.status().message(),
              "x: 40 x 30 = 1200 pixels exceeds the limit of 1199 (raise --max-pixels)");
    options.max_pixels = 1200;
    EXPECT_TRUE(DecodeImage(Encode(image, ext), "x", options).ok()) << ext;
    options.max_pixels = 0;  // No limit.
    EXPECT_TRUE(DecodeImage(Encode(image, ext), "x", options).ok()) << ext;
  }
}

std::string Le32(uint32_t v) {
  return {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
          static_cast<char>(v >> 24)};
}

// Small files whose headers claim huge sizes, in every format whose header kiln parses.
std::vector<std::pair<std::string, std::string>> HugeHeaders() {
  std::string png = Encode(cv::Mat(2, 2, CV_8UC3, cv::Scalar(1, 2, 3)), ".png");
  png.replace(16, 8, std::string("\x00\x0f\x42\x3f\x00\x0f\x42\x3f", 8));  // 999999 x 999999
  std::string jpeg = Encode(cv::Mat(8, 8, CV_8UC3, cv::Scalar(1, 2, 3)), ".jpg");
  const size_t sof = jpeg.find("\xFF\xC0");
  jpeg.replace(sof + 5, 4, std::string("\xFF\xFF\xFF\xFF", 4));  // 65535 x 65535
  std::string bmp = Encode(cv::Mat(2, 2, CV_8UC3, cv::Scalar(1, 2, 3)), ".bmp");
  bmp.replace(18, 8, Le32(999999) + Le32(999999));
  // Little-endian TIFF, IFD0 at 8 with LONG ImageWidth and ImageLength, then junk.
  const std::string tiff = std::string("II*\0", 4) + Le32(8) + std::string("\x02\x00", 2) +
                           std::string("\x00\x01\x04\x00", 4) + Le32(1) + Le32(999999) +
                           std::string("\x01\x01\x04\x00", 4) + Le32(1) + Le32(999999) + Le32(0) +
                           std::string(100, '\x55');
  // VP8X canvas of 2^24 x 2^24.
  const std::string webp = "RIFF" + Le32(122) + "WEBPVP8X" + Le32(10) + Le32(0) +
                           std::string("\xff\xff\xff\xff\xff\xff", 6) + std::string(100, '\x55');
  return {{"big.png", png},
          {"big.jpg", jpeg},
          {"big.bmp", bmp},
          {"big.tiff", tiff},
          {"big.webp", webp},
          {"big.ppm", "P6\n999999 999999\n255\n" + std::string(100, '\x55')},
          {"big.pgm", "P5 # comment\n999999\n999999\n255\n" + std::string(100, '\x55')},
          {"big.pam",
           "P7\nWIDTH 999999\nHEIGHT 999999\nDEPTH 3\nMAXVAL 255\nTUPLTYPE RGB\n"
           "ENDHDR\n" +
               std::string(100, '\x55')}};
}

// A header claiming more than --max-pixels is refused with kiln's message in every format it
// parses, before OpenCV sees the file (OpenCV's own limit would answer with an assertion text).
TEST(DecodeImage, HugeHeaderSizesAreRefusedByMaxPixelsInEveryFormat) {
  for (const auto& [name, bytes] : HugeHeaders()) {
    Result<cv::Mat> image = DecodeImage(bytes, name, DecodeOptions());
    ASSERT_FALSE(image.ok()) << name;
    EXPECT_EQ(image.status().code(), StatusCode::kInvalidArgument) << image.status().ToString();
    EXPECT_EQ(image.status().location().file, name);
    EXPECT_NE(image.status().reason().find("exceeds the limit of 178956970 (raise --max-pixels)"),
              std::string::npos)
        << image.status().ToString();
  }
}

// With --max-pixels 0, OpenCV's own limit (2^30 pixels, 2^20 a side) still refuses them: named
// by kiln, with the environment variables that raise it, never OpenCV's assertion text.
TEST(DecodeImage, OpenCvSizeLimitIsNamedNotAsserted) {
  DecodeOptions options;
  options.max_pixels = 0;
  for (const auto& [name, bytes] : HugeHeaders()) {
    // libjpeg-turbo decodes JPEG, without OpenCV's limit; the PNG has too little IDAT data.
    if (name == "big.jpg" || name == "big.png") continue;
    Result<cv::Mat> image = DecodeImage(bytes, name, options);
    ASSERT_FALSE(image.ok()) << name;
    const std::string message = image.status().message();
    EXPECT_EQ(message.find("Assertion"), std::string::npos) << message;
    EXPECT_EQ(message.find("OpenCV("), std::string::npos) << message;
    if (name == "big.webp" || name == "big.tiff") continue;  // Their decoders fail first.
    EXPECT_EQ(image.status().code(), StatusCode::kInvalidArgument) << message;
    EXPECT_NE(message.find("exceeds OpenCV's decoder limit"), std::string::npos) << message;
    EXPECT_NE(message.find("OPENCV_IO_MAX_IMAGE_PIXELS"), std::string::npos) << message;
  }
}

// Headers cut short or garbled where the size should be: "truncated or invalid (<what>)" from
// kiln, naming the format and the byte offset.
TEST(DecodeImage, GarbledHeadersGetKilnsMessage) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a.ppm", "P6\nxx yy\n255\n"},
      {"b.ppm", "P6\n12"},
      {"c.bmp", std::string("BM\x10\0\0\0", 6)},
      {"d.tiff", std::string("II*\0\xff\xff\0\0", 8)},
      {"e.webp", std::string("RIFF\x10\0\0\0WEBPVP8 \x04\0\0\0", 20)},
  };
  for (const auto& [name, bytes] : cases) {
    Result<cv::Mat> image = DecodeImage(bytes, name, DecodeOptions());
    ASSERT_FALSE(image.ok()) << name;
    EXPECT_EQ(image.status().code(), StatusCode::kCorruption) << image.status().ToString();
    EXPECT_EQ(image.status().reason().rfind("truncated or invalid (", 0), 0u)
        << image.status().ToString();
    EXPECT_NE(image.status().reason().find("offset"), std::string::npos)
        << image.status().ToString();
    EXPECT_EQ(image.status().message().find("OpenCV"), std::string::npos)
        << image.status().ToString();
  }
}

TEST(DecodeImage, OptionErrors) {
  const std::string png = Encode(cv::Mat(2, 2, CV_8UC1, cv::Scalar(0)), ".png");
  for (uint32_t channels : {0u, 2u, 4u}) {
    Result<cv::Mat> image = DecodeImage(png, "p.png", Channels(channels));
    EXPECT_EQ(image.status().code(), StatusCode::kInvalidArgument) << channels;
  }
}

TEST(DecodeImage, FloatTiffIsNotSupported) {
  const cv::Mat image(2, 2, CV_32FC1, cv::Scalar(0.5));
  Result<cv::Mat> decoded = DecodeImage(Encode(image, ".tiff"), "f.tiff", DecodeOptions());
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(decoded.status().message().find("f.tiff"), std::string::npos);
}

TEST(DecodeImage, Deterministic) {
  const std::string bytes = ReadTestInput(std::string(kGoImageData) + "video-001.jpeg");
  Result<cv::Mat> a = DecodeImage(bytes, "a", DecodeOptions());
  Result<cv::Mat> b = DecodeImage(bytes, "b", DecodeOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(cv::norm(*a, *b, cv::NORM_INF), 0);
}

}  // namespace
}  // namespace kiln
