// DecodeImage against Pillow (python3-pil), the reference that torchvision's ImageFolder users
// have: first frames of GIF, animated WebP, APNG and multi-page TIFF (field case B38), WebP
// transparency (B40), and 32-bit BMPs of every header generation, whose fourth byte is alpha
// only when the header says so. tests/tools/pillow_reference.py writes the files (with Pillow,
// or byte by byte where Pillow cannot write them) and prints Pillow's decode of each.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <opencv2/core.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tools/imaging/image_decoder.h"
#include "tools/imaging/image_header.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const std::string kScript = std::string(KILN_SOURCE_DIR) + "/tests/tools/pillow_reference.py";

using ::kiln::testing::ReadFileString;

std::string RunCommand(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  EXPECT_EQ(::pclose(pipe), 0) << command;
  return out;
}

// Pillow's first frame of one file.
struct PillowImage {
  std::string mode;  // "RGB", "RGBA", or "ERROR"
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // row-major, 3 or 4 bytes a pixel
  std::string error;
};

class PillowDecodeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("/usr/bin/python3 -c 'import PIL' 2>/dev/null") != 0) return;
    dir_ =
        new std::string(fs::temp_directory_path() / ("kiln_pillow_" + std::to_string(::getpid())));
    RunCommand("/usr/bin/python3 " + kScript + " make " + *dir_);
    std::string files;
    for (const fs::directory_entry& e : fs::directory_iterator(*dir_)) {
      files += " '" + e.path().string() + "'";
    }
    std::istringstream lines(RunCommand("/usr/bin/python3 " + kScript + " decode" + files));
    reference_ = new std::map<std::string, PillowImage>();
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string name;
      PillowImage image;
      fields >> name >> image.mode;
      if (image.mode == "ERROR") {
        std::getline(fields, image.error);
      } else {
        std::string hex;
        fields >> image.width >> image.height >> hex;
        for (size_t i = 0; i + 1 < hex.size(); i += 2) {
          image.pixels.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
        }
      }
      (*reference_)[name] = image;
    }
  }
  static void TearDownTestSuite() {
    if (dir_ != nullptr) fs::remove_all(*dir_);
  }
  void SetUp() override {
    if (reference_ == nullptr) GTEST_SKIP() << "python3-pil missing (scripts/setup.sh)";
  }

  static std::string Bytes(const std::string& name) { return ReadFileString(*dir_ + "/" + name); }
  static const PillowImage& Pillow(const std::string& name) { return reference_->at(name); }

  // Pillow's image as kiln's policy makes it: RGB as is; RGBA composited over white
  // (tools/imaging/decode_policy.md, step 4).
  static cv::Mat PillowAsPolicy(const std::string& name) {
    const PillowImage& p = Pillow(name);
    cv::Mat out(p.height, p.width, CV_8UC3);
    const int n = p.mode == "RGBA" ? 4 : 3;
    for (int i = 0; i < p.width * p.height; ++i) {
      const uint8_t* px = &p.pixels[static_cast<size_t>(i * n)];
      const uint32_t a = n == 4 ? px[3] : 255;
      for (int c = 0; c < 3; ++c) {
        out.data[3 * i + c] = static_cast<uint8_t>((px[c] * a + 255 * (255 - a) + 127) / 255);
      }
    }
    return out;
  }

  static std::string* dir_;
  static std::map<std::string, PillowImage>* reference_;
};

std::string* PillowDecodeTest::dir_ = nullptr;
std::map<std::string, PillowImage>* PillowDecodeTest::reference_ = nullptr;

::testing::AssertionResult SameAsPillow(const std::string& name, const cv::Mat& pillow,
                                        const Result<cv::Mat>& kiln, double tolerance = 0) {
  if (!kiln.ok()) return ::testing::AssertionFailure() << name << ": " << kiln.status().ToString();
  if (kiln->size() != pillow.size() || kiln->type() != CV_8UC3) {
    return ::testing::AssertionFailure() << name << ": kiln " << kiln->cols << "x" << kiln->rows
                                         << ", Pillow " << pillow.cols << "x" << pillow.rows;
  }
  const double diff = cv::norm(*kiln, pillow, cv::NORM_INF);
  if (diff > tolerance) {
    return ::testing::AssertionFailure()
           << name << ": pixels differ by " << diff << "\nkiln " << *kiln << "\nPillow " << pillow;
  }
  return ::testing::AssertionSuccess();
}

TEST_F(PillowDecodeTest, B38_FirstFrameOfGifAnimatedWebpApngAndTiffIsPillows) {
  for (const std::string name :
       {"single.gif", "anim.gif", "anim.webp", "anim.png", "pages.tiff", "transparent.gif"}) {
    const cv::Mat pillow = PillowAsPolicy(name);
    EXPECT_TRUE(SameAsPillow(name, pillow, DecodeImage(Bytes(name), name, DecodeOptions())));
    // The first frame is red (transparent.gif: left half transparent, so white).
    const cv::Vec3b last = pillow.at<cv::Vec3b>(pillow.rows - 1, pillow.cols - 1);
    EXPECT_EQ(last, cv::Vec3b(255, 0, 0)) << name;
  }
  EXPECT_EQ(PillowAsPolicy("transparent.gif").at<cv::Vec3b>(0, 0), cv::Vec3b(255, 255, 255));
}

// Real GIFs from golang-1.19-src (interlaced, 5 bits per pixel, grey, a triangle with
// transparency) decode as Pillow decodes them.
TEST_F(PillowDecodeTest, B38_RealGifsFromDebianMatchPillow) {
  const std::string dir = "/usr/share/go-1.19/src/image/testdata/";
  std::vector<std::string> gifs;
  std::string args;
  if (fs::is_directory(dir)) {
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".gif") {
        gifs.push_back(e.path().string());
        args += " '" + e.path().string() + "'";
      }
    }
  }
  if (gifs.empty()) GTEST_SKIP() << dir << " missing (golang-1.19-src)";
  std::istringstream lines(RunCommand("/usr/bin/python3 " + kScript + " decode" + args));
  std::string line;
  int compared = 0;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string name, mode, hex;
    int width = 0, height = 0;
    fields >> name >> mode >> width >> height >> hex;
    ASSERT_NE(mode, "ERROR") << line;
    PillowImage p{mode, width, height, {}, ""};
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
      p.pixels.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    }
    (*reference_)["go/" + name] = p;
    EXPECT_TRUE(SameAsPillow(name, PillowAsPolicy("go/" + name),
                             DecodeImage(ReadFileString(dir + name), name, DecodeOptions())));
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(gifs.size()));
}

TEST_F(PillowDecodeTest, B38_DamagedGifAndAnimatedWebpNameTheirDecoder) {
  // Cut inside the first frame's data.
  for (const std::string name : {"single.gif", "anim.webp"}) {
    const std::string bytes = Bytes(name);
    const std::string cut = bytes.substr(0, bytes.size() * 2 / 3);
    Result<cv::Mat> r = DecodeImage(cut, name, DecodeOptions());
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    EXPECT_EQ(r.status().message().rfind(name + ": truncated or invalid (" +
                                             (name == "single.gif" ? "giflib: " : "libwebp: "),
                                         0),
              0u)
        << r.status().message();
  }
  DecodeOptions small;
  small.max_pixels = 63;
  Result<cv::Mat> r = DecodeImage(Bytes("anim.gif"), "anim.gif", small);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "anim.gif: 8 x 8 = 64 pixels exceeds the limit of 63 (raise --max-pixels)");
}

TEST_F(PillowDecodeTest, B40_TransparentWebpPixelsBecomeTheBackgroundNeverGreen) {
  for (const std::string name : {"b40_lossless.webp", "b40_lossy.webp"}) {
    const bool lossless = name == "b40_lossless.webp";
    Result<cv::Mat> r = DecodeImage(Bytes(name), name, DecodeOptions());
    EXPECT_TRUE(SameAsPillow(name, PillowAsPolicy(name), r, lossless ? 0 : 1));
    ASSERT_TRUE(r.ok());
    for (int y = 0; y < 8; ++y) {
      for (int x = 0; x < 8; ++x) {
        const cv::Vec3b px = r->at<cv::Vec3b>(y, x);
        // Transparent: exactly white (WebP keeps alpha losslessly). Red: exact, or within 8
        // for lossy, except the column at the edge, where the lossy encoder itself bleeds the
        // hidden green into the red (Pillow decodes the same there, checked above).
        if (x < 4) {
          EXPECT_EQ(px, cv::Vec3b(255, 255, 255)) << name << " " << x;
        } else if (lossless || x > 4) {
          EXPECT_LE(cv::norm(px, cv::Vec3b(255, 0, 0), cv::NORM_INF), lossless ? 0 : 8)
              << name << " " << x;
        }
      }
    }
  }
}

// 32-bit BMP: one pixel red with padding byte 0, one green with padding / alpha 128.
TEST_F(PillowDecodeTest, Bmp32AlphaOnlyWhereTheHeaderDeclaresIt) {
  struct Case {
    std::string name;
    bool alpha;  // what the header declares
  };
  const std::vector<Case> cases = {
      {"bmp_v1_rgb.bmp", false},       {"bmp_v1_bitfields.bmp", false},
      {"bmp_v2_bitfields.bmp", false}, {"bmp_v3_no_alpha.bmp", false},
      {"bmp_v3_alpha.bmp", true},      {"bmp_v4_no_alpha.bmp", false},
      {"bmp_v4_alpha.bmp", true},      {"bmp_v5_no_alpha.bmp", false},
      {"bmp_v5_alpha.bmp", true},      {"bmp_v5_rgb_with_alpha_mask.bmp", false},
  };
  for (const Case& c : cases) {
    const std::string bytes = Bytes(c.name);
    EXPECT_EQ(BmpDeclaresAlpha(bytes), c.alpha) << c.name;
    Result<cv::Mat> r = DecodeImage(bytes, c.name, DecodeOptions());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const PillowImage& pillow = Pillow(c.name);
    if (pillow.mode != "ERROR") {
      EXPECT_EQ(pillow.mode, c.alpha ? "RGBA" : "RGB") << c.name;
      EXPECT_TRUE(SameAsPillow(c.name, PillowAsPolicy(c.name), r));
    } else {
      // Pillow 9.4 reads no 52- or 56-byte header ("Unsupported BMP header type"): the header
      // alone says what the pixels are.
      EXPECT_NE(pillow.error.find("Unsupported BMP header type"), std::string::npos);
    }
    // Without alpha: red and green. With alpha: red at alpha 0 is white, green at alpha 128
    // is green over white.
    EXPECT_EQ(r->at<cv::Vec3b>(0, 0), c.alpha ? cv::Vec3b(255, 255, 255) : cv::Vec3b(255, 0, 0))
        << c.name;
    EXPECT_EQ(r->at<cv::Vec3b>(0, 1), c.alpha ? cv::Vec3b(127, 255, 127) : cv::Vec3b(0, 255, 0))
        << c.name;
  }
  EXPECT_FALSE(BmpDeclaresAlpha("BM"));
  EXPECT_FALSE(BmpDeclaresAlpha(""));
}

}  // namespace
}  // namespace kiln
