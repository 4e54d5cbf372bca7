#include "tools/imaging/preprocessor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

namespace kiln {
namespace {

PreprocessOptions Options(uint32_t height, uint32_t width, uint32_t channels,
                          DType dtype = DType::kUint8, Layout layout = Layout::kHWC,
                          CropMode crop = CropMode::kCenter) {
  PreprocessOptions options;
  options.schema.height = height;
  options.schema.width = width;
  options.schema.channels = channels;
  options.schema.dtype = dtype;
  options.schema.layout = layout;
  options.crop = crop;
  return options;
}

std::vector<uint8_t> PreprocessOk(const cv::Mat& image, const PreprocessOptions& options) {
  std::vector<uint8_t> out(options.schema.sample_bytes(), 0xEE);
  const Status status = Preprocess(image, options, "img.png", out.data());
  EXPECT_TRUE(status.ok()) << status.ToString();
  return out;
}

// A 3-channel image whose pixel (x, y) is (x, y, x + y) in R, G, B.
cv::Mat Coordinates(int width, int height) {
  cv::Mat image(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      image.at<cv::Vec3b>(y, x) = cv::Vec3b(x, y, static_cast<uint8_t>(x + y));
    }
  }
  return image;
}

float Float32At(const std::vector<uint8_t>& bytes, size_t index) {
  const uint32_t bits = uint32_t{bytes[4 * index]} | uint32_t{bytes[4 * index + 1]} << 8 |
                        uint32_t{bytes[4 * index + 2]} << 16 | uint32_t{bytes[4 * index + 3]} << 24;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t HalfBitsAt(const std::vector<uint8_t>& bytes, size_t index) {
  return static_cast<uint16_t>(bytes[2 * index] | bytes[2 * index + 1] << 8);
}

TEST(ValidatePreprocessOptions, AcceptsDefaultsAndRejectsBadFields) {
  EXPECT_TRUE(ValidatePreprocessOptions(Options(4, 4, 3)).ok());
  EXPECT_EQ(ValidatePreprocessOptions(Options(0, 4, 3)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidatePreprocessOptions(Options(4, 4, 2)).code(), StatusCode::kInvalidArgument);
  PreprocessOptions options = Options(4, 4, 3, DType::kFloat32);
  options.std[1] = 0;
  Status status = ValidatePreprocessOptions(options);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("std[1]"), std::string::npos) << status.message();
  options.std[1] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ValidatePreprocessOptions(options).code(), StatusCode::kInvalidArgument);
  options.std[1] = 1;
  options.mean[2] = std::nanf("");
  EXPECT_EQ(ValidatePreprocessOptions(options).code(), StatusCode::kInvalidArgument);
  // Preprocess refuses them too, naming the file.
  std::vector<uint8_t> out(options.schema.sample_bytes());
  status = Preprocess(Coordinates(4, 4), options, "x.png", out.data());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("x.png"), std::string::npos);
}

TEST(Preprocess, RejectsWrongImages) {
  const PreprocessOptions options = Options(4, 4, 3);
  std::vector<uint8_t> out(options.schema.sample_bytes());
  EXPECT_EQ(Preprocess(cv::Mat(), options, "e.png", out.data()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Preprocess(cv::Mat(4, 4, CV_8UC1), options, "g.png", out.data()).code(),
            StatusCode::kInvalidArgument);
  const Status status = Preprocess(cv::Mat(4, 4, CV_16UC3), options, "d.png", out.data());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("d.png"), std::string::npos);
}

TEST(Preprocess, SameSizeIsCopiedExactlyInHwc) {
  const cv::Mat image = Coordinates(5, 3);
  const std::vector<uint8_t> out = PreprocessOk(image, Options(3, 5, 3));
  ASSERT_EQ(out.size(), 45u);
  EXPECT_EQ(0, std::memcmp(out.data(), image.data, 45));
}

TEST(Preprocess, ChwLayout) {
  const cv::Mat image = Coordinates(5, 3);
  const std::vector<uint8_t> out =
      PreprocessOk(image, Options(3, 5, 3, DType::kUint8, Layout::kCHW));
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 3; ++y) {
      for (int x = 0; x < 5; ++x) {
        EXPECT_EQ(out[(c * 3 + y) * 5 + x], image.at<cv::Vec3b>(y, x)[c]);
      }
    }
  }
}

TEST(Preprocess, CentreCropOffsetsAreFloorOfHalfTheSlack) {
  // resize_shorter equal to the shorter side: no resampling, only the crop.
  const cv::Mat image = Coordinates(11, 8);
  PreprocessOptions options = Options(5, 4, 3);
  options.resize_shorter = 8;
  const std::vector<uint8_t> out = PreprocessOk(image, options);
  // x0 = floor((11 - 4) / 2) = 3, y0 = floor((8 - 5) / 2) = 1.
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 4; ++x) {
      EXPECT_EQ(out[(y * 4 + x) * 3 + 0], x + 3);
      EXPECT_EQ(out[(y * 4 + x) * 3 + 1], y + 1);
    }
  }
}

TEST(Preprocess, DefaultResizeIsTheSmallestCover) {
  // 40 x 10 to 8 x 8: shrink to 32 x 8 (area), crop columns 12..19.
  cv::Mat image(10, 40, CV_8UC1);
  for (int x = 0; x < 40; ++x) image.col(x).setTo(x * 5);
  const std::vector<uint8_t> out = PreprocessOk(image, Options(8, 8, 1));
  // Output column j of the 32-wide image averages source columns 1.25 j .. 1.25 (j + 1);
  // its centre is at source x = 1.25 j + 0.125 (pixel-centre convention), value ~ 5 * that.
  for (int x = 0; x < 8; ++x) {
    const double centre = 1.25 * (x + 12 + 0.5) - 0.5;
    EXPECT_NEAR(out[x], 5 * centre, 1.5) << x;
    EXPECT_EQ(out[7 * 8 + x], out[x]);  // Every row alike.
  }
}

TEST(Preprocess, ResizeShorterTruncatesLikeTorchvision) {
  // 300 x 200 with shorter side 100: 150 x 100; then a 100 x 100 crop at x0 = 25.
  // 301 x 200: long side int(301 * 100 / 200) = 150 (150.5 truncated).
  for (int width : {300, 301}) {
    cv::Mat image(200, width, CV_8UC1);
    for (int x = 0; x < width; ++x) image.col(x).setTo(x < width / 2 ? 0 : 200);
    PreprocessOptions options = Options(100, 100, 1);
    options.resize_shorter = 100;
    const std::vector<uint8_t> out = PreprocessOk(image, options);
    // The step sits at resized column 75, i.e. output column 50.
    EXPECT_EQ(out[48], 0) << width;
    EXPECT_EQ(out[52], 200) << width;
  }
}

TEST(Preprocess, NoCropStretches) {
  const cv::Mat image(2, 8, CV_8UC3, cv::Scalar(9, 8, 7));
  const std::vector<uint8_t> out =
      PreprocessOk(image, Options(6, 3, 3, DType::kUint8, Layout::kHWC, CropMode::kNone));
  for (size_t i = 0; i < out.size(); i += 3) {
    EXPECT_EQ(out[i], 9);
    EXPECT_EQ(out[i + 1], 8);
    EXPECT_EQ(out[i + 2], 7);
  }
}

TEST(Preprocess, EnlargingIsBilinearWithPixelCentres) {
  // 2 x 1 [0, 200] to 4 x 1: centres at -0.25, 0.25, 0.75, 1.25 -> 0, 50, 150, 200.
  cv::Mat image(1, 2, CV_8UC1);
  image.at<uint8_t>(0, 0) = 0;
  image.at<uint8_t>(0, 1) = 200;
  const std::vector<uint8_t> out =
      PreprocessOk(image, Options(1, 4, 1, DType::kUint8, Layout::kHWC, CropMode::kNone));
  EXPECT_EQ(out, (std::vector<uint8_t>{0, 50, 150, 200}));
}

TEST(Preprocess, MixedAxesShrinkWithAreaAndGrowBilinear) {
  // 8 x 2 with thin lines at even columns, to 4 x 4: each output pixel averages one line and
  // one gap (the area pass), rows are constant (the bilinear pass).
  cv::Mat image(2, 8, CV_8UC1, cv::Scalar(0));
  for (int x = 0; x < 8; x += 2) image.col(x).setTo(200);
  const std::vector<uint8_t> out =
      PreprocessOk(image, Options(4, 4, 1, DType::kUint8, Layout::kHWC, CropMode::kNone));
  for (uint8_t v : out) EXPECT_EQ(v, 100);
}

TEST(Preprocess, Float32Normalisation) {
  const cv::Mat image(1, 2, CV_8UC3, cv::Scalar(0, 128, 255));  // R 0, G 128, B 255.
  PreprocessOptions options = Options(1, 2, 3, DType::kFloat32, Layout::kCHW);
  options.mean = {0.485f, 0.456f, 0.406f};
  options.std = {0.229f, 0.224f, 0.225f};
  const std::vector<uint8_t> out = PreprocessOk(image, options);
  ASSERT_EQ(out.size(), 24u);
  const double values[3] = {0, 128, 255};
  for (int c = 0; c < 3; ++c) {
    const float expected =
        static_cast<float>((values[c] / 255.0 - double{options.mean[c]}) / double{options.std[c]});
    EXPECT_EQ(Float32At(out, c * 2), expected) << c;
    EXPECT_EQ(Float32At(out, c * 2 + 1), expected) << c;
  }
}

TEST(Preprocess, Float16Encoding) {
  cv::Mat image(1, 3, CV_8UC1);
  image.at<uint8_t>(0, 0) = 0;
  image.at<uint8_t>(0, 1) = 255;
  image.at<uint8_t>(0, 2) = 51;  // 0.2.
  const std::vector<uint8_t> out = PreprocessOk(image, Options(1, 3, 1, DType::kFloat16));
  EXPECT_EQ(HalfBitsAt(out, 0), 0x0000);  // 0.0
  EXPECT_EQ(HalfBitsAt(out, 1), 0x3C00);  // 1.0
  EXPECT_EQ(HalfBitsAt(out, 2), 0x3266);  // 0.2 rounded to binary16.
  // Grey uses mean[0] and std[0] only.
  PreprocessOptions options = Options(1, 3, 1, DType::kFloat16);
  options.mean = {0.5f, 9.f, 9.f};
  options.std = {0.5f, 9.f, 9.f};
  const std::vector<uint8_t> normalised = PreprocessOk(image, options);
  EXPECT_EQ(HalfBitsAt(normalised, 0), 0xBC00);  // -1.0
  EXPECT_EQ(HalfBitsAt(normalised, 1), 0x3C00);  // +1.0
}

TEST(Preprocess, SmallerThanCropNamesBothSizes) {
  PreprocessOptions options = Options(32, 32, 3);
  options.resize_shorter = 16;
  std::vector<uint8_t> out(options.schema.sample_bytes());
  const Status status = Preprocess(Coordinates(40, 20), options, "small.png", out.data());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "small.png: image of 40 x 20 resized to 32 x 16 is smaller than the crop of 32 x 32");
}

TEST(Preprocess, MaxPixelsGuardsTheResize) {
  PreprocessOptions options = Options(8, 8, 3);
  options.resize_shorter = 100;
  options.max_pixels = 100 * 100 - 1;
  std::vector<uint8_t> out(options.schema.sample_bytes());
  Status status = Preprocess(Coordinates(10, 10), options, "m.png", out.data());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("100 x 100"), std::string::npos) << status.message();
  options.max_pixels = 0;  // No limit.
  EXPECT_TRUE(Preprocess(Coordinates(10, 10), options, "m.png", out.data()).ok());
}

TEST(Preprocess, DeterministicAndWritesExactlySampleBytes) {
  cv::Mat image(37, 53, CV_8UC3);
  cv::randu(image, 0, 256);
  PreprocessOptions options = Options(16, 16, 3, DType::kFloat16, Layout::kCHW);
  options.mean = {0.4f, 0.5f, 0.6f};
  options.std = {0.2f, 0.3f, 0.4f};
  std::vector<uint8_t> a(options.schema.sample_bytes() + 8, 0xAB);
  std::vector<uint8_t> b(options.schema.sample_bytes() + 8, 0xCD);
  ASSERT_TRUE(Preprocess(image, options, "r.png", a.data()).ok());
  ASSERT_TRUE(Preprocess(image, options, "r.png", b.data()).ok());
  EXPECT_TRUE(std::equal(a.begin(), a.end() - 8, b.begin()));
  for (size_t i = a.size() - 8; i < a.size(); ++i) {  // Nothing written past the sample.
    EXPECT_EQ(a[i], 0xAB);
    EXPECT_EQ(b[i], 0xCD);
  }
}

}  // namespace
}  // namespace kiln
