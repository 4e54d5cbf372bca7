#include "tools/imaging/sample_renderer.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "formats/dataset.h"
#include "reader/loader.h"

namespace kiln {

namespace {

constexpr int kMinTilePixels = 96;
constexpr int kLabelPixels = 18;

// Converts one stored sample into an 8-bit BGR image (what cv::imwrite expects).
cv::Mat ToDisplayable(const uint8_t* data, const TensorSchema& s, const std::array<float, 3>& mean,
                      const std::array<float, 3>& std_dev) {
  const int h = static_cast<int>(s.height), w = static_cast<int>(s.width);
  const int c = static_cast<int>(s.channels);
  const int depth = s.dtype == DType::kUint8 ? CV_8U : s.dtype == DType::kFloat16 ? CV_16F : CV_32F;
  std::vector<cv::Mat> planes;
  if (s.layout == Layout::kCHW) {
    const size_t plane_bytes = size_t(h) * w * DTypeSize(s.dtype);
    for (int ch = 0; ch < c; ++ch) {
      planes.push_back(
          cv::Mat(h, w, CV_MAKETYPE(depth, 1), const_cast<uint8_t*>(data) + ch * plane_bytes));
    }
  } else {
    cv::split(cv::Mat(h, w, CV_MAKETYPE(depth, c), const_cast<uint8_t*>(data)), planes);
  }
  for (int ch = 0; ch < c; ++ch) {
    cv::Mat& p = planes[ch];
    if (s.dtype != DType::kUint8) {
      cv::Mat f;
      p.convertTo(f, CV_32F);
      // out = (v * std + mean) * 255, undoing the pack-time normalisation.
      f.convertTo(p, CV_8U, std_dev[ch] * 255.0, mean[ch] * 255.0);
    } else {
      p = p.clone();
    }
  }
  cv::Mat rgb;
  cv::merge(planes, rgb);
  cv::Mat bgr;
  if (c == 3) {
    cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  } else {
    cv::cvtColor(rgb, bgr, cv::COLOR_GRAY2BGR);
  }
  return bgr;
}

}  // namespace

std::vector<uint64_t> EvenlySpacedIndices(uint64_t num_samples, uint64_t count) {
  std::vector<uint64_t> out;
  count = std::min(count, num_samples);
  for (uint64_t i = 0; i < count; ++i) {
    out.push_back(static_cast<uint64_t>((static_cast<__uint128_t>(i) * num_samples) / count));
  }
  return out;
}

Status RenderSamples(const std::string& dir, const std::vector<uint64_t>& indices, uint32_t columns,
                     const std::string& png_path) {
  if (indices.empty() || columns == 0) return Status::InvalidArgument("nothing to show");
  EnableRemoteDatasets();  // this plugin has its own copy of Dataset::Open's opener
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> dataset, Dataset::Open(dir));
  const TensorSchema& s = dataset->schema();
  std::array<float, 3> mean{0, 0, 0}, std_dev{1, 1, 1};
  const auto pre = nlohmann::json::parse(dataset->manifest().preprocessing_json, nullptr, false);
  if (pre.is_object() && pre.contains("mean") && pre.contains("std")) {
    for (size_t ch = 0; ch < 3 && ch < pre["mean"].size() && ch < pre["std"].size(); ++ch) {
      mean[ch] = pre["mean"][ch].get<float>();
      std_dev[ch] = pre["std"][ch].get<float>();
    }
  }
  const int scale =
      std::max(1, (kMinTilePixels + static_cast<int>(s.height) - 1) / static_cast<int>(s.height));
  const int tile_w = std::max(static_cast<int>(s.width) * scale, 80);
  const int tile_h = static_cast<int>(s.height) * scale + kLabelPixels;
  const int cols = static_cast<int>(std::min<size_t>(columns, indices.size()));
  const int rows = static_cast<int>((indices.size() + cols - 1) / cols);
  cv::Mat canvas(rows * tile_h, cols * tile_w, CV_8UC3, cv::Scalar(32, 32, 32));
  RecordDecoder decoder;
  std::vector<uint8_t> sample(s.sample_bytes());
  for (size_t i = 0; i < indices.size(); ++i) {
    int64_t label = 0;
    KILN_RETURN_IF_ERROR(dataset->ReadSample(indices[i], &decoder, sample.data(), &label));
    cv::Mat tile = ToDisplayable(sample.data(), s, mean, std_dev);
    cv::Mat big;
    cv::resize(tile, big, cv::Size(), scale, scale, cv::INTER_NEAREST);
    const int x = static_cast<int>(i % cols) * tile_w, y = static_cast<int>(i / cols) * tile_h;
    big.copyTo(canvas(cv::Rect(x + (tile_w - big.cols) / 2, y, big.cols, big.rows)));
    const auto& classes = dataset->manifest().classes;
    std::string name = label >= 0 && static_cast<size_t>(label) < classes.size()
                           ? classes[static_cast<size_t>(label)]
                           : std::to_string(label);
    if (name.size() > 14) name = name.substr(0, 13) + "~";
    cv::putText(canvas, name, cv::Point(x + 3, y + tile_h - 5), cv::FONT_HERSHEY_SIMPLEX, 0.38,
                cv::Scalar(235, 235, 235), 1, cv::LINE_AA);
  }
  try {
    if (!cv::imwrite(png_path, canvas)) return Status::IOError("cannot write " + png_path);
  } catch (const cv::Exception& e) {
    return Status::IOError("cannot write " + png_path + ": " + e.what());
  }
  return Status::Ok();
}

}  // namespace kiln
