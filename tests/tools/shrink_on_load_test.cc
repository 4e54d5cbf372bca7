// Shrink-on-load (tools/imaging/shrink_on_load.h): the rule that picks libjpeg-turbo's IDCT scale,
// its interplay with EXIF orientation and the crop modes, and how far its tensors are from the full
// decode on real photos (bounds taken from tools/imaging/decode_policy.md, "Shrink on load").
#include "tools/imaging/shrink_on_load.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tools/imaging/image_decoder.h"
#include "tools/imaging/jpeg_decoder.h"
#include "tools/imaging/preprocessor.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using ::kiln::testing::ReadFileString;

PreprocessOptions Square(uint32_t size, CropMode crop = CropMode::kCenter) {
  PreprocessOptions p;
  p.schema = {DType::kUint8, Layout::kHWC, size, size, 3};
  p.crop = crop;
  return p;
}

// The real JPEGs the tests have: opencv-doc's photos and samples/photos.
std::vector<std::string> RealJpegs() {
  std::vector<std::string> files;
  for (const std::string& dir : {std::string("/usr/share/doc/opencv-doc/examples/data"),
                                 std::string(KILN_SOURCE_DIR) + "/samples/photos"}) {
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
      if (e.path().extension() == ".jpg") files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Decodes and preprocesses `bytes` with `decode`, as the packer does.
std::vector<uint8_t> Pack(const std::string& bytes, const std::string& name,
                          const DecodeOptions& decode, const PreprocessOptions& p,
                          cv::Size* decoded_size = nullptr) {
  std::vector<uint8_t> out(p.schema.sample_bytes());
  cv::Size full;
  Result<cv::Mat> image = DecodeImage(bytes, name, decode, &full);
  EXPECT_TRUE(image.ok()) << image.status().ToString();
  if (!image.ok()) return {};
  if (decoded_size != nullptr) *decoded_size = image->size();
  const Status s = Preprocess(*image, p, name, out.data(), full);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

TEST(ShrinkOnLoadTest, ScaleDenominatorIsTheLargestThatKeepsTheMinimum) {
  EXPECT_EQ(JpegScaleDenominator(5120, 2880, 796, 448), 4u);  // 1280 x 720
  EXPECT_EQ(JpegScaleDenominator(2560, 1600, 716, 448), 2u);  // 640 x 400 would be too small
  EXPECT_EQ(JpegScaleDenominator(4000, 4000, 448, 448), 8u);  // 500 x 500
  EXPECT_EQ(JpegScaleDenominator(3584, 3584, 448, 448), 8u);  // exactly 448: still enough
  EXPECT_EQ(JpegScaleDenominator(3583, 3583, 448, 448), 8u);  // ceil(3583 / 8) = 448
  EXPECT_EQ(JpegScaleDenominator(3576, 3576, 448, 448), 4u);  // ceil(3576 / 8) = 447
  EXPECT_EQ(JpegScaleDenominator(800, 600, 448, 448), 1u);
  EXPECT_EQ(JpegScaleDenominator(5120, 2880, 0, 448), 1u);  // no minimum: full size
  EXPECT_EQ(JpegScaleDenominator(5120, 2880, 448, 0), 1u);
}

TEST(ShrinkOnLoadTest, MinimumIsTwiceTheResizeTargetOfEachCropMode) {
  // Centre crop, covering resize: 5120 x 2880 -> 398 x 224.
  EXPECT_EQ(ShrinkOnLoadMinimum(5120, 2880, Square(224)), cv::Size(796, 448));
  EXPECT_EQ(ShrinkOnLoadMinimum(2880, 5120, Square(224)), cv::Size(448, 796));
  // --resize 256: the shorter side becomes 256 (torchvision Resize(256)).
  PreprocessOptions shorter = Square(224);
  shorter.resize_shorter = 256;
  EXPECT_EQ(ShrinkOnLoadMinimum(5120, 2880, shorter), cv::Size(2 * 455, 2 * 256));
  // --crop none: straight to the schema's size, aspect not kept.
  EXPECT_EQ(ShrinkOnLoadMinimum(5120, 2880, Square(224, CropMode::kNone)), cv::Size(448, 448));
  // An image Preprocess refuses (smaller than the crop after --resize): no reduction.
  PreprocessOptions tiny = Square(224);
  tiny.resize_shorter = 100;
  EXPECT_TRUE(ShrinkOnLoadMinimum(5120, 2880, tiny).empty());
}

TEST(ShrinkOnLoadTest, DecodedImageKeepsTwiceTheTargetAndTheFullSizeIsReported) {
  const std::string path = std::string(KILN_SOURCE_DIR) + "/samples/photos/scene/building.jpg";
  const std::string bytes = ReadFileString(path);  // 868 x 600
  const PreprocessOptions p = Square(56);          // target 81 x 56, minimum 162 x 112
  const DecodeOptions decode = ShrinkOnLoadDecodeOptions(bytes, DecodeOptions(), p);
  EXPECT_EQ(decode.min_width, 162u);
  EXPECT_EQ(decode.min_height, 112u);
  cv::Size full;
  Result<cv::Mat> image = DecodeImage(bytes, path, decode, &full);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(full, cv::Size(868, 600));
  EXPECT_EQ(image->size(), cv::Size(217, 150));  // 1/4: ceil(868 / 4) x ceil(600 / 4)
  // A PNG, or a JPEG too small for any reduction, is left alone.
  const std::string png_path = "/usr/share/go-1.19/src/image/testdata/video-001.png";
  if (fs::exists(png_path)) {
    const DecodeOptions png =
        ShrinkOnLoadDecodeOptions(ReadFileString(png_path), DecodeOptions(), p);
    EXPECT_EQ(png.min_width, 0u);
  }
  const DecodeOptions big = ShrinkOnLoadDecodeOptions(bytes, DecodeOptions(), Square(448));
  EXPECT_EQ(big.min_width, 0u);
  EXPECT_EQ(big.min_height, 0u);
}

TEST(ShrinkOnLoadTest, OrientationIsAppliedBeforeTheRule) {
  // imaging's testdata: the same 50 x 70 picture (upright) stored with EXIF orientation 1..8;
  // 5..8 are stored 70 x 50. To 8 x 8, the target is 8 x 11 upright, so the minimum 16 x 22
  // allows 1/2 (25 x 35 upright) whichever way the file is stored.
  const std::string dir = "/usr/share/gocode/src/github.com/disintegration/imaging/testdata/";
  if (!fs::exists(dir)) GTEST_SKIP() << "golang-github-disintegration-imaging-dev is not installed";
  const PreprocessOptions p = Square(8);
  const std::string upright_bytes = ReadFileString(dir + "orientation_0.jpg");
  const std::vector<uint8_t> upright =
      Pack(upright_bytes, "0", ShrinkOnLoadDecodeOptions(upright_bytes, DecodeOptions(), p), p);
  ASSERT_FALSE(upright.empty());
  for (int orientation = 1; orientation <= 8; ++orientation) {
    SCOPED_TRACE("orientation " + std::to_string(orientation));
    const std::string bytes =
        ReadFileString(dir + "orientation_" + std::to_string(orientation) + ".jpg");
    const DecodeOptions decode = ShrinkOnLoadDecodeOptions(bytes, DecodeOptions(), p);
    EXPECT_EQ(decode.min_width, 16u);  // upright, whatever the stored orientation
    EXPECT_EQ(decode.min_height, 22u);
    cv::Size decoded;
    const std::vector<uint8_t> tensor = Pack(bytes, "o", decode, p, &decoded);
    EXPECT_EQ(decoded, cv::Size(25, 35));
    ASSERT_EQ(tensor.size(), upright.size());
    // Each file was re-encoded: compare the mean error (a wrong orientation gives 40 and more).
    double sum = 0;
    for (size_t i = 0; i < tensor.size(); ++i) sum += std::abs(int{tensor[i]} - int{upright[i]});
    EXPECT_LT(sum / tensor.size(), 8.0);
  }
}

// The measured floors of decode_policy.md, "Shrink on load", on every real JPEG the tests have:
// per file PSNR >= 27 dB and max difference <= 64; over all files PSNR >= 36 dB. A wrong crop
// window or scale (one pixel off) gives far less on these textured photos.
TEST(ShrinkOnLoadTest, RealPhotosStayCloseToTheFullDecode) {
  const std::vector<std::string> files = RealJpegs();
  if (files.size() < 40) GTEST_SKIP() << "opencv-doc is not installed";
  for (const uint32_t size : {112u, 56u, 32u}) {
    for (const CropMode crop : {CropMode::kCenter, CropMode::kNone}) {
      SCOPED_TRACE("size " + std::to_string(size) + (crop == CropMode::kNone ? " crop none" : ""));
      const PreprocessOptions p = Square(size, crop);
      double total_sq = 0;
      uint64_t total_n = 0, shrunk = 0;
      for (const std::string& path : files) {
        const std::string bytes = ReadFileString(path);
        const DecodeOptions decode = ShrinkOnLoadDecodeOptions(bytes, DecodeOptions(), p);
        if (decode.min_width == 0) continue;
        cv::Size decoded;
        const std::vector<uint8_t> exact = Pack(bytes, path, DecodeOptions(), p);
        const std::vector<uint8_t> small = Pack(bytes, path, decode, p, &decoded);
        ASSERT_EQ(exact.size(), small.size()) << path;
        // Twice the target on both sides (the target is the crop for kNone, else at least it).
        EXPECT_GE(decoded.width, static_cast<int>(2 * size)) << path;
        EXPECT_GE(decoded.height, static_cast<int>(2 * size)) << path;
        double sq = 0;
        int max_diff = 0;
        for (size_t i = 0; i < exact.size(); ++i) {
          const int d = std::abs(int{exact[i]} - int{small[i]});
          sq += double(d) * d;
          max_diff = std::max(max_diff, d);
        }
        const double psnr = sq == 0 ? 99 : 10 * std::log10(255.0 * 255.0 * exact.size() / sq);
        EXPECT_GE(psnr, 27.0) << path;
        EXPECT_LE(max_diff, 64) << path;
        total_sq += sq;
        total_n += exact.size();
        ++shrunk;
      }
      // Most of these photos (256 x 256 to 1282 x 1110) allow a reduction at these sizes.
      EXPECT_GE(shrunk, files.size() / 2);
      ASSERT_GT(total_n, 0u);
      EXPECT_GE(10 * std::log10(255.0 * 255.0 * total_n / total_sq), 36.0);
    }
  }
}

}  // namespace
}  // namespace kiln
