// tools/imaging/jpeg_decoder.h promises OpenCV's pixels: cv::imdecode(IMREAD_COLOR) then BGR-to-RGB
// (or BGR-to-grey), EXIF orientation included. These tests hold it to that, byte for byte, on every
// JPEG of the Debian data packages scripts/setup.sh installs and samples/photos, on synthetic JPEGs
// of every chroma subsampling, progressive and grey, and on EXIF segments OpenCV reads in its own
// way.
#include "tools/imaging/jpeg_decoder.h"

#include <gtest/gtest.h>
#include <jpeglib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tools/imaging/image_decoder.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using ::kiln::testing::ReadFileString;

// OpenCV's reading of `bytes` in kiln's channel order: RGB (3) or grey (1); empty if it fails.
cv::Mat OpenCvReference(const std::string& bytes, int channels) {
  const cv::Mat buffer(1, static_cast<int>(bytes.size()), CV_8UC1, const_cast<char*>(bytes.data()));
  const cv::Mat bgr = cv::imdecode(buffer, cv::IMREAD_COLOR);
  if (bgr.empty()) return bgr;
  cv::Mat out;
  cv::cvtColor(bgr, out, channels == 1 ? cv::COLOR_BGR2GRAY : cv::COLOR_BGR2RGB);
  return out;
}

// Returns "" when DecodeJpeg and OpenCV agree on `bytes` for both channel counts, else what
// differs. CMYK / YCCK files must be refused with NotSupported (DecodeImage hands them to OpenCV).
std::string Compare(const std::string& bytes, const std::string& name, bool* compared) {
  *compared = false;
  for (int channels : {3, 1}) {
    const std::string what = name + " (" + std::to_string(channels) + " channels)";
    const cv::Mat reference = OpenCvReference(bytes, channels);
    Result<cv::Mat> ours = DecodeJpeg(bytes, name, static_cast<uint32_t>(channels), 0);
    if (!ours.ok() && ours.status().code() == StatusCode::kNotSupported) {
      if (ours.status().message().find("CMYK or YCCK") == std::string::npos) {
        return what + ": " + ours.status().ToString();
      }
      continue;
    }
    if (reference.empty() != !ours.ok()) {
      return what + ": OpenCV " + (reference.empty() ? "fails" : "decodes") + ", kiln " +
             (ours.ok() ? "decodes" : ours.status().ToString());
    }
    if (reference.empty()) continue;
    if (ours->size() != reference.size() || ours->type() != reference.type()) {
      return what + ": kiln gives " + std::to_string(ours->cols) + "x" +
             std::to_string(ours->rows) + " " + cv::typeToString(ours->type()) + ", OpenCV " +
             std::to_string(reference.cols) + "x" + std::to_string(reference.rows) + " " +
             cv::typeToString(reference.type());
    }
    if (!ours->isContinuous()) return what + ": not continuous";
    const double diff = cv::norm(*ours, reference, cv::NORM_INF);
    if (diff != 0) return what + ": pixels differ by up to " + std::to_string(diff);
    *compared = true;
  }
  return "";
}

TEST(JpegDecoderTest, EveryJpegOnTheMachineMatchesOpenCv) {
  const std::vector<std::string> dirs = {
      "/usr/share/doc/opencv-doc/examples",                       // opencv-doc
      "/usr/share/go-1.19/src/image",                             // golang-1.19-src
      "/usr/share/gocode/src/github.com/disintegration/imaging",  // imaging testdata
      std::string(KILN_SOURCE_DIR) + "/samples/photos"};
  int files = 0;
  int compared = 0;
  for (const std::string& dir : dirs) {
    if (!fs::is_directory(dir)) continue;
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
      std::string ext = e.path().extension().string();
      for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (!e.is_regular_file() || (ext != ".jpg" && ext != ".jpeg")) continue;
      ++files;
      bool ok = false;
      const std::string bad = Compare(ReadFileString(e.path().string()), e.path().string(), &ok);
      EXPECT_EQ(bad, "");
      compared += ok ? 1 : 0;
    }
  }
  if (files == 0) GTEST_SKIP() << "no JPEG found: install the data packages (scripts/setup.sh)";
  // The packages hold about 100 JPEGs (grey, 4:2:0, 4:2:2, 4:4:4, progressive, EXIF, CMYK).
  EXPECT_GE(compared, 50) << files << " files seen";
}

// Encodes `image` (8-bit BGR or grey) with libjpeg: luma sampling factors h x v (chroma 1 x 1),
// optionally progressive. OpenCV 4.6's imencode cannot choose the subsampling.
std::string EncodeJpeg(const cv::Mat& image, int h, int v, bool progressive, int quality) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &out, &size);
  cinfo.image_width = static_cast<JDIMENSION>(image.cols);
  cinfo.image_height = static_cast<JDIMENSION>(image.rows);
  cinfo.input_components = image.channels();
  cinfo.in_color_space = image.channels() == 3 ? JCS_EXT_BGR : JCS_GRAYSCALE;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  cinfo.comp_info[0].h_samp_factor = h;
  cinfo.comp_info[0].v_samp_factor = v;
  if (progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uchar*>(image.ptr<uchar>(static_cast<int>(cinfo.next_scanline)));
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string bytes(reinterpret_cast<const char*>(out), size);
  free(out);
  return bytes;
}

TEST(JpegDecoderTest, SyntheticJpegsOfEverySubsamplingMatchOpenCv) {
  cv::Mat colour(37, 53, CV_8UC3);  // odd sizes: partial MCUs on both axes
  cv::randu(colour, 0, 256);
  cv::GaussianBlur(colour, colour, cv::Size(5, 5), 0);  // something JPEG-like, not just noise
  cv::Mat grey;
  cv::cvtColor(colour, grey, cv::COLOR_BGR2GRAY);
  int n = 0;
  // 4:4:4, 4:2:2, 4:2:0, 4:4:0 and 4:1:1.
  const int factors[5][2] = {{1, 1}, {2, 1}, {2, 2}, {1, 2}, {4, 1}};
  for (const cv::Mat& image : {colour, grey}) {
    for (const auto& f : factors) {
      if (image.channels() == 1 && (f[0] != 1 || f[1] != 1)) continue;
      for (bool progressive : {false, true}) {
        for (int quality : {40, 95}) {
          const std::string name = "synthetic channels " + std::to_string(image.channels()) +
                                   " sampling " + std::to_string(f[0]) + "x" +
                                   std::to_string(f[1]) + (progressive ? " progressive" : "") +
                                   " q" + std::to_string(quality);
          bool ok = false;
          EXPECT_EQ(Compare(EncodeJpeg(image, f[0], f[1], progressive, quality), name, &ok), "");
          EXPECT_TRUE(ok) << name;
          ++n;
        }
      }
    }
  }
  EXPECT_EQ(n, 24);
}

// An APP1 segment with `payload`.
std::string App1(const std::string& payload) {
  const size_t length = payload.size() + 2;
  return std::string("\xFF\xE1", 2) + static_cast<char>(length >> 8) +
         static_cast<char>(length & 0xFF) + payload;
}

// "Exif\0\0" and a TIFF block whose IFD0 holds one Orientation entry of `value`, in big-endian
// (MM) or little-endian (II) order, with `type` (3 = SHORT) as the entry's type.
std::string ExifOrientation(int value, bool big_endian, int type = 3) {
  auto u16 = [&](int v) {
    return big_endian ? std::string{static_cast<char>(v >> 8), static_cast<char>(v & 0xFF)}
                      : std::string{static_cast<char>(v & 0xFF), static_cast<char>(v >> 8)};
  };
  auto u32 = [&](int v) { return big_endian ? u16(0) + u16(v) : u16(v) + u16(0); };
  std::string tiff = (big_endian ? std::string("MM") : std::string("II")) + u16(42) + u32(8);
  tiff += u16(1) + u16(0x0112) + u16(type) + u32(1) + u16(value) + u16(0) + u32(0);
  return std::string("Exif\0\0", 6) + tiff;
}

// `jpeg` (from cv::imencode: SOI, APP0 ...) with `segments` inserted after its APP0.
std::string Insert(const std::string& jpeg, const std::string& segments) {
  const size_t app0_end =
      4 + ((static_cast<unsigned char>(jpeg[4]) << 8) | static_cast<unsigned char>(jpeg[5]));
  return jpeg.substr(0, app0_end) + segments + jpeg.substr(app0_end);
}

TEST(JpegDecoderTest, ExifOrientationIsReadAsOpenCvReadsIt) {
  cv::Mat image(24, 40, CV_8UC3);
  cv::randu(image, 0, 256);
  std::vector<uchar> buf;
  ASSERT_TRUE(cv::imencode(".jpg", image, buf, {cv::IMWRITE_JPEG_QUALITY, 90}));
  const std::string plain(buf.begin(), buf.end());
  ASSERT_EQ(plain.substr(0, 4), "\xFF\xD8\xFF\xE0");

  struct Case {
    std::string name;
    std::string segments;
    int orientation;  // what JpegExifOrientation must say
    // OpenCV 4.6 reads the first APP1 only; where it is not Exif, OpenCV ignores the
    // orientation that kiln applies. Then kiln's pixels are OpenCV's for `same_as_opencv_with`.
    std::string same_as_opencv_with;
  };
  std::vector<Case> cases;
  for (int v = 0; v <= 9; ++v) {
    const int expected = v >= 1 && v <= 8 ? v : 1;
    cases.push_back({"MM " + std::to_string(v), App1(ExifOrientation(v, true)), expected, ""});
    cases.push_back({"II " + std::to_string(v), App1(ExifOrientation(v, false)), expected, ""});
  }
  // An XMP packet first does not hide the Exif orientation (OpenCV 4.6 would miss it).
  cases.push_back(
      {"XMP before Exif",
       App1(std::string("http://ns.adobe.com/xap/1.0/\0<x/>", 33)) + App1(ExifOrientation(6, true)),
       6, App1(ExifOrientation(6, true))});
  cases.push_back(
      {"Exif before XMP",
       App1(ExifOrientation(6, true)) + App1(std::string("http://ns.adobe.com/xap/1.0/\0<x/>", 33)),
       6, ""});
  cases.push_back({"truncated TIFF", App1(ExifOrientation(6, true).substr(0, 16)), 1, ""});
  cases.push_back({"Exif header only", App1(std::string("Exif\0\0", 6)), 1, ""});
  cases.push_back({"no Exif", "", 1, ""});
  for (const Case& c : cases) {
    const std::string jpeg = Insert(plain, c.segments);
    EXPECT_EQ(JpegExifOrientation(jpeg), c.orientation) << c.name;
    if (!c.same_as_opencv_with.empty()) {
      Result<cv::Mat> ours = DecodeJpeg(jpeg, c.name, 3, 0);
      ASSERT_TRUE(ours.ok());
      const cv::Mat reference = OpenCvReference(Insert(plain, c.same_as_opencv_with), 3);
      ASSERT_EQ(ours->size(), reference.size()) << c.name;
      EXPECT_EQ(cv::norm(*ours, reference, cv::NORM_INF), 0) << c.name;
      continue;
    }
    bool ok = false;
    EXPECT_EQ(Compare(jpeg, c.name, &ok), "");
    EXPECT_TRUE(ok) << c.name;
  }
}

// The APP1 segments of a JPEG, in file order (payloads, without marker and length).
std::vector<std::string> App1Payloads(const std::string& jpeg) {
  std::vector<std::string> out;
  size_t pos = 2;
  while (pos + 4 <= jpeg.size() && static_cast<unsigned char>(jpeg[pos]) == 0xFF) {
    const unsigned marker = static_cast<unsigned char>(jpeg[pos + 1]);
    const size_t length = (static_cast<unsigned char>(jpeg[pos + 2]) << 8) |
                          static_cast<unsigned char>(jpeg[pos + 3]);
    if (marker == 0xDA) break;
    if (marker == 0xE1) out.push_back(jpeg.substr(pos + 4, length - 2));
    pos += 2 + length;
  }
  return out;
}

// `jpeg` without its APP1 segments, and `segments` put where the first APP1 was (after APP0).
std::string SpliceApp1s(const std::string& jpeg, const std::string& segments) {
  std::string head = jpeg.substr(0, 2), rest;
  size_t pos = 2;
  while (pos + 4 <= jpeg.size() && static_cast<unsigned char>(jpeg[pos]) == 0xFF) {
    const unsigned marker = static_cast<unsigned char>(jpeg[pos + 1]);
    const size_t length = (static_cast<unsigned char>(jpeg[pos + 2]) << 8) |
                          static_cast<unsigned char>(jpeg[pos + 3]);
    if (marker == 0xDA) break;
    if (marker == 0xE0)
      head += jpeg.substr(pos, 2 + length);
    else if (marker != 0xE1)
      rest += jpeg.substr(pos, 2 + length);
    pos += 2 + length;
  }
  return head + segments + rest + jpeg.substr(pos);
}

// Sets the value of IFD0's Orientation entry in an Exif APP1 payload of either byte order.
void SetOrientation(std::string* exif, int value) {
  auto u8 = [&](size_t i) { return static_cast<unsigned>(static_cast<unsigned char>((*exif)[i])); };
  const bool big = exif->substr(6, 2) == "MM";
  auto u16 = [&](size_t i) { return big ? (u8(i) << 8) | u8(i + 1) : u8(i) | (u8(i + 1) << 8); };
  auto u32 = [&](size_t i) {
    return big ? (u16(i) << 16) | u16(i + 2) : u16(i) | (u16(i + 2) << 16);
  };
  const size_t tiff = 6, ifd0 = tiff + u32(tiff + 4);
  for (size_t e = 0; e < u16(ifd0); ++e) {
    const size_t entry = ifd0 + 2 + 12 * e;
    if (u16(entry) == 0x0112) {
      (*exif)[entry + 8 + (big ? 1 : 0)] = static_cast<char>(value);
      return;
    }
  }
  ADD_FAILURE() << "no Orientation entry in IFD0";
}

// Phones put XMP and XMP-extension APP1s before the Exif APP1: the orientation is read from the
// first APP1 that starts with "Exif\0\0", in either byte order. Built by splicing the APP1s of
// real JPEGs (samples/photos) into a real photo stored rotated (imaging's orientation_6.jpg).
TEST(JpegDecoderTest, OrientationComesFromTheFirstExifApp1WhereverItIs) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/samples/photos/";
  const std::string rotated = ReadFileString(dir + "letter_f/orientation_6.jpg");  // stored 70 x 50
  const std::vector<std::string> rotated_app1 = App1Payloads(rotated);
  ASSERT_EQ(rotated_app1.size(), 1u);
  const std::string exif_mm = rotated_app1[0];
  ASSERT_EQ(exif_mm.substr(0, 8), std::string("Exif\0\0MM", 8));
  // squirrel_cls.jpg: a camera's little-endian Exif (Orientation 1), then its XMP packet.
  const std::vector<std::string> squirrel =
      App1Payloads(ReadFileString(dir + "animal/squirrel_cls.jpg"));
  ASSERT_EQ(squirrel.size(), 2u);
  std::string exif_ii = squirrel[0];
  ASSERT_EQ(exif_ii.substr(0, 8), std::string("Exif\0\0II", 8));
  const std::string exif_ii_1 = exif_ii;
  SetOrientation(&exif_ii, 6);
  const std::string xmp = squirrel[1];
  ASSERT_EQ(xmp.rfind(std::string("http://ns.adobe.com/xap/1.0/\0", 29), 0), 0u);
  // An XMP extension segment: its namespace, a 32-digit GUID, full length, offset, then data.
  const std::string xmp_ext = std::string("http://ns.adobe.com/xmp/extension/\0", 35) +
                              std::string(32, 'A') + std::string("\0\0\0\x10\0\0\0\0", 8) +
                              "<x:xmpmeta xmlns:x='adobe:ns:meta/'/>";

  // The upright picture: what OpenCV makes of the file as the camera wrote it (Exif first).
  const cv::Mat upright = OpenCvReference(rotated, 3);
  ASSERT_EQ(upright.size(), cv::Size(50, 70));
  struct Case {
    std::string name;
    std::string segments;
    int orientation;
  };
  const std::vector<Case> cases = {
      {"Exif MM alone", App1(exif_mm), 6},
      {"XMP, Exif MM", App1(xmp) + App1(exif_mm), 6},
      {"XMP, XMP extension, Exif MM", App1(xmp) + App1(xmp_ext) + App1(exif_mm), 6},
      {"XMP extension, XMP, Exif II", App1(xmp_ext) + App1(xmp) + App1(exif_ii), 6},
      {"XMP, Exif II", App1(xmp) + App1(exif_ii), 6},
      {"first Exif wins: II 1, then MM 6", App1(exif_ii_1) + App1(exif_mm), 1},
      {"first Exif wins: XMP, MM 6, then II 1", App1(xmp) + App1(exif_mm) + App1(exif_ii_1), 6},
      {"'Exif' without its two zero bytes is not Exif",
       App1(std::string("Exif") + exif_mm.substr(6)) + App1(exif_ii), 6},
      {"XMP only", App1(xmp), 1},
  };
  for (const Case& c : cases) {
    const std::string jpeg = SpliceApp1s(rotated, c.segments);
    EXPECT_EQ(JpegExifOrientation(jpeg), c.orientation) << c.name;
    Result<cv::Mat> ours = DecodeImage(jpeg, c.name, DecodeOptions());
    ASSERT_TRUE(ours.ok()) << ours.status().ToString();
    if (c.orientation == 6) {
      ASSERT_EQ(ours->size(), upright.size()) << c.name;
      EXPECT_EQ(cv::norm(*ours, upright, cv::NORM_INF), 0) << c.name;
    } else {
      EXPECT_EQ(ours->size(), cv::Size(70, 50)) << c.name;
    }
  }
}

TEST(JpegDecoderTest, DamagedJpegsFailOrDecodeAsOpenCvDoes) {
  cv::Mat image(64, 64, CV_8UC3);
  cv::randu(image, 0, 256);
  std::vector<uchar> buf;
  ASSERT_TRUE(cv::imencode(".jpg", image, buf, {cv::IMWRITE_JPEG_QUALITY, 90}));
  const std::string jpeg(buf.begin(), buf.end());
  // Cut anywhere: where OpenCV fails, so does DecodeJpeg. Where the scan data is cut, OpenCV 4.6
  // leaves the rows it never decoded as copies (its source suspends) and libjpeg-turbo decodes
  // them from nothing: both are wrong, and DecodeImage refuses such files, naming them, before
  // either decoder runs (no end-of-image marker, policy step 1).
  for (size_t len : {size_t{2}, size_t{20}, size_t{200}, jpeg.size() / 2, jpeg.size() - 2}) {
    const std::string cut = jpeg.substr(0, len);
    const std::string name = "dir/cut-at-" + std::to_string(len) + ".jpg";
    if (OpenCvReference(cut, 3).empty()) {
      EXPECT_FALSE(DecodeJpeg(cut, name, 3, 0).ok()) << name;
    }
    Result<cv::Mat> policy = DecodeImage(cut, name, DecodeOptions());
    ASSERT_FALSE(policy.ok()) << name;
    EXPECT_EQ(policy.status().code(), StatusCode::kCorruption) << name;
    // "truncated or invalid (...)", or "not an image" for the first 2 bytes alone.
    EXPECT_EQ(policy.status().message().rfind(name + ": ", 0), 0u) << policy.status().message();
  }
  // A header error names the file and libjpeg's reason.
  std::string bad_sof = jpeg;
  const size_t sof = bad_sof.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  bad_sof[sof + 4] = 0x0C;  // sample precision 12: not this libjpeg's
  Result<cv::Mat> r = DecodeJpeg(bad_sof, "dir/a.jpg", 3, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(r.status().message().rfind("dir/a.jpg: truncated or invalid (libjpeg: ", 0), 0u)
      << r.status().message();
}

TEST(JpegDecoderTest, PixelLimitIsCheckedBeforeDecoding) {
  cv::Mat image(30, 40, CV_8UC3, cv::Scalar(1, 2, 3));
  std::vector<uchar> buf;
  ASSERT_TRUE(cv::imencode(".jpg", image, buf));
  const std::string jpeg(buf.begin(), buf.end());
  EXPECT_TRUE(DecodeJpeg(jpeg, "a.jpg", 3, 1200).ok());
  Result<cv::Mat> r = DecodeJpeg(jpeg, "a.jpg", 3, 1199);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "a.jpg: 40 x 30 = 1200 pixels exceeds the limit of 1199 (raise --max-pixels)");
}

TEST(JpegDecoderTest, CmykJpegStillDecodesThroughDecodeImage) {
  const std::string path = "/usr/share/go-1.19/src/image/testdata/video-001.cmyk.jpeg";
  if (!fs::exists(path)) GTEST_SKIP() << path << " missing (golang-1.19-src)";
  const std::string bytes = ReadFileString(path);
  Result<cv::Mat> direct = DecodeJpeg(bytes, path, 3, 0);
  ASSERT_FALSE(direct.ok());
  EXPECT_EQ(direct.status().code(), StatusCode::kNotSupported);
  Result<cv::Mat> decoded = DecodeImage(bytes, path, DecodeOptions());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  const cv::Mat reference = OpenCvReference(bytes, 3);
  ASSERT_EQ(decoded->size(), reference.size());
  EXPECT_EQ(cv::norm(*decoded, reference, cv::NORM_INF), 0);
}

}  // namespace
}  // namespace kiln
