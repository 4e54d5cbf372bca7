// Field case B41: at natural size, kiln's JPEG pixels are djpeg's (libjpeg-turbo's reference
// decoder, package libjpeg-turbo-progs), byte for byte, for one real photo saved by cjpeg as
// 4:2:0, 4:2:2 and 4:4:4, progressive, arithmetic-coded, with restart markers, and at an odd
// size (37 x 23).
#include <gtest/gtest.h>
#include <unistd.h>

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

bool Sh(const std::string& command) { return std::system(command.c_str()) == 0; }

TEST(DjpegReferenceTest, B41_PixelsAtNaturalSizeAreDjpegs) {
  if (!Sh("command -v cjpeg >/dev/null && command -v djpeg >/dev/null")) {
    GTEST_SKIP() << "cjpeg / djpeg missing (libjpeg-turbo-progs)";
  }
  const std::string dir = ::testing::TempDir() + "kiln_djpeg_" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  // A real photo as PPM: whole (512 x 512), and cut to an odd 37 x 23.
  const cv::Mat photo =
      cv::imread(std::string(KILN_SOURCE_DIR) + "/samples/photos/animal/baboon.jpg");
  ASSERT_FALSE(photo.empty());
  ASSERT_TRUE(cv::imwrite(dir + "/whole.ppm", photo));
  ASSERT_TRUE(cv::imwrite(dir + "/odd.ppm", photo(cv::Rect(101, 203, 37, 23)).clone()));
  struct Variant {
    std::string name;
    std::string cjpeg_flags;
  };
  const std::vector<Variant> variants = {
      {"420", "-sample 2x2"},
      {"422", "-sample 2x1"},
      {"444", "-sample 1x1"},
      {"progressive", "-sample 2x2 -progressive"},
      {"arithmetic", "-sample 2x2 -arithmetic"},
      {"restart", "-sample 2x1 -restart 1"},
      {"grey", "-grayscale"},
  };
  int compared = 0;
  for (const std::string source : {"whole", "odd"}) {
    for (const Variant& v : variants) {
      const std::string base = dir + "/" + source + "-" + v.name;
      ASSERT_TRUE(Sh("cjpeg -quality 85 " + v.cjpeg_flags + " -outfile " + base + ".jpg " + dir +
                     "/" + source + ".ppm"));
      ASSERT_TRUE(Sh("djpeg -pnm -outfile " + base + ".pnm " + base + ".jpg"));
      const cv::Mat reference = cv::imread(base + ".pnm", cv::IMREAD_COLOR);  // BGR
      ASSERT_FALSE(reference.empty()) << base;
      cv::Mat rgb;
      cv::cvtColor(reference, rgb, cv::COLOR_BGR2RGB);
      Result<cv::Mat> ours = DecodeImage(ReadFileString(base + ".jpg"), base, DecodeOptions());
      ASSERT_TRUE(ours.ok()) << ours.status().ToString();
      ASSERT_EQ(ours->size(), rgb.size()) << base;
      EXPECT_EQ(cv::norm(*ours, rgb, cv::NORM_INF), 0) << base;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 14);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
