// JPEGs whose image data is damaged are refused by DecodeImage, with libjpeg's warning as the
// reason, on every decoder path (libjpeg-turbo direct, and the CMYK path through OpenCV);
// harmless warnings and bytes after the end-of-image marker are not damage
// (tools/imaging/decode_policy.md, "Damaged data").
//
// The corpus: the real photos of samples/photos and of opencv-doc, cut inside their scans (with
// and without an end-of-image marker put back), with bytes changed in their scans, and with junk
// after their end. The oracle for changed bytes is libjpeg itself with its stock error manager:
// a JPEG has no checksum, so a change that leaves a valid entropy-coded stream (a coefficient's
// magnitude bits, say) cannot be seen by any decoder; every change that libjpeg can see must be
// refused.
#include <gtest/gtest.h>
#include <jpeglib.h>
// After jpeglib.h, whose configuration decides which JWRN_* codes exist.
#include <jerror.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tools/imaging/image_decoder.h"
#include "tools/imaging/jpeg_decoder.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using ::kiln::testing::ReadFileString;

// Every JPEG of samples/photos and opencv-doc's example data, sorted.
std::vector<std::string> RealPhotos() {
  std::vector<std::string> files;
  for (const std::string& dir : {std::string(KILN_SOURCE_DIR) + "/samples/photos",
                                 std::string("/usr/share/doc/opencv-doc/examples/data")}) {
    if (!fs::is_directory(dir)) continue;
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
      if (e.is_regular_file() && e.path().extension() == ".jpg") {
        const std::string bytes = ReadFileString(e.path().string());
        if (bytes.rfind("\xFF\xD8\xFF", 0) == 0) files.push_back(e.path().string());
      }
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Byte offsets of the first scan's entropy-coded data [begin, end): after the first SOS
// segment, up to the last end-of-image marker.
struct ScanData {
  size_t begin = 0;
  size_t end = 0;
};

ScanData FindScanData(const std::string& jpeg) {
  auto at = [&](size_t i) { return static_cast<unsigned char>(jpeg[i]); };
  size_t pos = 2;
  while (pos + 4 <= jpeg.size() && at(pos) == 0xFF) {
    const size_t length = (at(pos + 2) << 8) | at(pos + 3);
    if (at(pos + 1) == 0xDA) return {pos + 2 + length, jpeg.rfind("\xFF\xD9")};
    pos += 2 + length;
  }
  ADD_FAILURE() << "no start of scan";
  return {};
}

// What libjpeg with its stock error manager says about `bytes` (the oracle): whether it stopped
// with an error, and its first warning's code and text.
struct Oracle {
  bool error = false;
  int first_warning = -1;  // JWRN_* code, -1 if none
  std::string first_warning_text;
};

struct OracleErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  Oracle* oracle;
};

void OracleErrorExit(j_common_ptr cinfo) {
  std::longjmp(reinterpret_cast<OracleErrorManager*>(cinfo->err)->jump, 1);
}

void OracleEmit(j_common_ptr cinfo, int level) {
  OracleErrorManager* err = reinterpret_cast<OracleErrorManager*>(cinfo->err);
  if (level >= 0 || err->oracle->first_warning != -1) return;
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  err->oracle->first_warning = cinfo->err->msg_code;
  err->oracle->first_warning_text = text;
}

// Decodes `bytes` to the end (RGB, or CMYK for four components), recording what libjpeg says.
Oracle AskLibjpeg(const std::string& bytes, Oracle* oracle, std::vector<uint8_t>* row) {
  jpeg_decompress_struct cinfo;
  OracleErrorManager err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = OracleErrorExit;
  err.pub.emit_message = OracleEmit;
  err.oracle = oracle;
  if (setjmp(err.jump) != 0) {
    oracle->error = true;
    jpeg_destroy_decompress(&cinfo);
    return *oracle;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = cinfo.num_components == 4 ? JCS_CMYK : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  row->resize(size_t{cinfo.output_width} * cinfo.output_components);
  JSAMPROW p = row->data();
  while (cinfo.output_scanline < cinfo.output_height) jpeg_read_scanlines(&cinfo, &p, 1);
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return *oracle;
}

Oracle AskLibjpeg(const std::string& bytes) {
  Oracle oracle;
  std::vector<uint8_t> row;
  return AskLibjpeg(bytes, &oracle, &row);
}

// True when DecodeImage's `status` is the refusal of a damaged file: Corruption naming it.
::testing::AssertionResult RefusedAsDamaged(const Result<cv::Mat>& r, const std::string& name) {
  if (r.ok()) return ::testing::AssertionFailure() << name << " was decoded";
  if (r.status().code() != StatusCode::kCorruption ||
      r.status().message().rfind(name + ": ", 0) != 0) {
    return ::testing::AssertionFailure() << name << ": " << r.status().ToString();
  }
  return ::testing::AssertionSuccess();
}

TEST(DamagedJpegTest, RealPhotosCutInsideTheirScansAreRefused) {
  const std::vector<std::string> photos = RealPhotos();
  ASSERT_GE(photos.size(), 20u) << "samples/photos holds 23 JPEGs";
  int refused_with_warning = 0;
  for (const std::string& path : photos) {
    const std::string jpeg = ReadFileString(path);
    const ScanData scan = FindScanData(jpeg);
    for (int k = 0; k < 8; ++k) {
      const size_t cut = scan.begin + (scan.end - scan.begin) * (2 * k + 1) / 16;
      // Cut short, and cut short with an end-of-image marker put back, which passes the
      // header check of policy step 1 and must be caught by libjpeg's warning.
      const std::string plain = jpeg.substr(0, cut);
      const std::string with_eoi = plain + "\xFF\xD9";
      const std::string name = path + "@" + std::to_string(cut);
      EXPECT_TRUE(RefusedAsDamaged(DecodeImage(plain, name, DecodeOptions()), name));
      Result<cv::Mat> r = DecodeImage(with_eoi, name, DecodeOptions());
      EXPECT_TRUE(RefusedAsDamaged(r, name));
      if (!r.ok()) {
        const Oracle oracle = AskLibjpeg(with_eoi);
        ASSERT_NE(oracle.first_warning, -1) << name;
        EXPECT_EQ(r.status().message(),
                  name + ": damaged image data (libjpeg: " + oracle.first_warning_text + ")");
        ++refused_with_warning;
      }
    }
  }
  EXPECT_EQ(refused_with_warning, static_cast<int>(photos.size()) * 8);
}

TEST(DamagedJpegTest, ChangedScanBytesAreRefusedWheneverLibjpegSeesDamage) {
  const std::vector<std::string> photos = RealPhotos();
  ASSERT_GE(photos.size(), 20u);
  int seen = 0, unseen = 0;
  for (const std::string& path : photos) {
    const std::string jpeg = ReadFileString(path);
    const ScanData scan = FindScanData(jpeg);
    for (int k = 0; k < 12; ++k) {
      std::string changed = jpeg;
      const size_t at = scan.begin + (scan.end - scan.begin) * (2 * k + 1) / 24;
      // Alternately one flipped bit and a whole byte replaced.
      changed[at] = k % 2 == 0 ? static_cast<char>(changed[at] ^ (1 << (k % 8)))
                               : static_cast<char>(changed[at] + 0x5B);
      const std::string name = path + "#" + std::to_string(at);
      const Oracle oracle = AskLibjpeg(changed);
      const bool damage_visible = oracle.error || (oracle.first_warning != -1 &&
                                                   !IsHarmlessJpegWarning(oracle.first_warning));
      Result<cv::Mat> r = DecodeImage(changed, name, DecodeOptions());
      if (damage_visible) {
        ++seen;
        EXPECT_TRUE(RefusedAsDamaged(r, name)) << oracle.first_warning_text;
      } else {
        ++unseen;
        EXPECT_TRUE(r.ok()) << r.status().ToString();
      }
    }
  }
  // About a third of such changes desynchronise the Huffman decoder enough for libjpeg to
  // notice (measured: 812 of 2300 on samples/photos).
  EXPECT_GT(seen, (seen + unseen) / 10) << seen << " of " << seen + unseen;
}

TEST(DamagedJpegTest, JunkAfterTheEndOfImageIsHarmless) {
  for (const std::string& path : RealPhotos()) {
    const std::string jpeg = ReadFileString(path);
    Result<cv::Mat> clean = DecodeImage(jpeg, path, DecodeOptions());
    ASSERT_TRUE(clean.ok()) << clean.status().ToString();
    // What phones append (a second JPEG, an MP4) and zero padding from copying tools.
    for (const std::string& junk : {std::string(4096, '\0'), jpeg, std::string("\xFF\x00junk")}) {
      Result<cv::Mat> r = DecodeImage(jpeg + junk, path, DecodeOptions());
      ASSERT_TRUE(r.ok()) << path << ": " << r.status().ToString();
      EXPECT_EQ(cv::norm(*r, *clean, cv::NORM_INF), 0) << path;
    }
  }
}

TEST(DamagedJpegTest, HarmlessWarningsDoNotRefuse) {
  // A JFIF APP0 claiming version 2.01 makes libjpeg warn (JWRN_JFIF_MAJOR): not damage.
  const std::string path = std::string(KILN_SOURCE_DIR) + "/samples/photos/animal/baboon.jpg";
  std::string jpeg = ReadFileString(path);
  ASSERT_EQ(jpeg.substr(6, 5), std::string("JFIF\0", 5));
  jpeg[11] = 2;
  const Oracle oracle = AskLibjpeg(jpeg);
  ASSERT_EQ(oracle.first_warning, JWRN_JFIF_MAJOR) << oracle.first_warning_text;
  Result<cv::Mat> r = DecodeImage(jpeg, path, DecodeOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(cv::norm(*r, *DecodeImage(ReadFileString(path), path, DecodeOptions()), cv::NORM_INF),
            0);

  // Bytes between two header markers: libjpeg would skip them with JWRN_EXTRANEOUS_DATA;
  // DecodeImage's header check (policy step 1) refuses the file first.
  std::string extra = ReadFileString(path);
  const size_t app0_end =
      4 + ((static_cast<unsigned char>(extra[4]) << 8) | static_cast<unsigned char>(extra[5]));
  extra.insert(app0_end, "\x00\x01\x02", 3);
  EXPECT_EQ(AskLibjpeg(extra).first_warning, JWRN_EXTRANEOUS_DATA);
  Result<cv::Mat> between = DecodeImage(extra, "x.jpg", DecodeOptions());
  ASSERT_FALSE(between.ok());
  EXPECT_EQ(between.status().message(),
            "x.jpg: truncated or invalid (JPEG has no marker at offset " +
                std::to_string(app0_end) + ")");

  for (int code : {JWRN_HIT_MARKER, JWRN_HUFF_BAD_CODE, JWRN_ARITH_BAD_CODE, JWRN_JPEG_EOF,
                   JWRN_MUST_RESYNC, JWRN_EXTRANEOUS_DATA, JWRN_BOGUS_PROGRESSION}) {
    EXPECT_FALSE(IsHarmlessJpegWarning(code)) << code;
  }
  for (int code : {JWRN_JFIF_MAJOR, JWRN_ADOBE_XFORM, JWRN_BOGUS_ICC, JWRN_NOT_SEQUENTIAL}) {
    EXPECT_TRUE(IsHarmlessJpegWarning(code)) << code;
  }
}

TEST(DamagedJpegTest, DamagedCmykJpegIsRefusedBeforeOpenCvDecodesIt) {
  const std::string path = "/usr/share/go-1.19/src/image/testdata/video-001.cmyk.jpeg";
  if (!fs::exists(path)) GTEST_SKIP() << path << " missing (golang-1.19-src)";
  const std::string jpeg = ReadFileString(path);
  ASSERT_TRUE(DecodeImage(jpeg, path, DecodeOptions()).ok());
  const ScanData scan = FindScanData(jpeg);
  const std::string cut = jpeg.substr(0, (scan.begin + scan.end) / 2) + "\xFF\xD9";
  // OpenCV 4.6 decodes this file (it only prints libjpeg's warning on stderr).
  const cv::Mat buffer(1, static_cast<int>(cut.size()), CV_8UC1, const_cast<char*>(cut.data()));
  ASSERT_FALSE(cv::imdecode(buffer, cv::IMREAD_COLOR).empty());
  Result<cv::Mat> r = DecodeImage(cut, "cmyk.jpeg", DecodeOptions());
  ASSERT_TRUE(RefusedAsDamaged(r, "cmyk.jpeg"));
  EXPECT_NE(r.status().message().find("damaged image data (libjpeg: "), std::string::npos)
      << r.status().message();
}

// The go package's truncated progressive JPEG keeps its end-of-image marker after the scans it
// has: libjpeg decodes those (a blurrier picture, as Go's PNG twin of it shows) and warns of
// nothing, so it is packed.
TEST(DamagedJpegTest, ProgressiveJpegWithFewerScansIsNotDamage) {
  const std::string path =
      "/usr/share/go-1.19/src/image/testdata/video-001.progressive.truncated.jpeg";
  if (!fs::exists(path)) GTEST_SKIP() << path << " missing (golang-1.19-src)";
  const std::string jpeg = ReadFileString(path);
  const Oracle oracle = AskLibjpeg(jpeg);
  EXPECT_FALSE(oracle.error);
  EXPECT_EQ(oracle.first_warning, -1) << oracle.first_warning_text;
  EXPECT_TRUE(DecodeImage(jpeg, path, DecodeOptions()).ok());
}

}  // namespace
}  // namespace kiln
