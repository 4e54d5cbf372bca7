#include "tools/imaging/sample_renderer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "formats/dataset.h"
#include "reader/augmenter.h"
#include "reader/jpeg_sample_decoder.h"
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

namespace {

// One tile of a picture: a sample's bytes (of `schema`) and the caption under it.
struct Tile {
  std::vector<uint8_t> bytes;
  std::string caption;
};

// The normalisation pack recorded (mean, std per channel), to undo for display.
void RecordedNormalisation(const Dataset& dataset, std::array<float, 3>* mean,
                           std::array<float, 3>* std_dev) {
  *mean = {0, 0, 0};
  *std_dev = {1, 1, 1};
  const auto pre = nlohmann::json::parse(dataset.manifest().preprocessing_json, nullptr, false);
  if (pre.is_object() && pre.contains("mean") && pre.contains("std")) {
    for (size_t ch = 0; ch < 3 && ch < pre["mean"].size() && ch < pre["std"].size(); ++ch) {
      (*mean)[ch] = pre["mean"][ch].get<float>();
      (*std_dev)[ch] = pre["std"][ch].get<float>();
    }
  }
}

std::string ClassName(const Dataset& dataset, int64_t label) {
  const auto& classes = dataset.manifest().classes;
  std::string name = label >= 0 && static_cast<size_t>(label) < classes.size()
                         ? classes[static_cast<size_t>(label)]
                         : std::to_string(label);
  if (name.size() > 14) name = name.substr(0, 13) + "~";
  return name;
}

// Draws `tiles` (each a sample of `s`) as a grid with `columns` tiles per row, enlarged with
// nearest-neighbour to at least kMinTilePixels high, each with its caption, to `png_path`.
Status WriteGrid(const std::vector<Tile>& tiles, const TensorSchema& s, uint32_t columns,
                 const std::array<float, 3>& mean, const std::array<float, 3>& std_dev,
                 const std::string& png_path) {
  const int scale =
      std::max(1, (kMinTilePixels + static_cast<int>(s.height) - 1) / static_cast<int>(s.height));
  const int tile_w = std::max(static_cast<int>(s.width) * scale, 80);
  const int tile_h = static_cast<int>(s.height) * scale + kLabelPixels;
  const int cols = static_cast<int>(std::min<size_t>(columns, tiles.size()));
  const int rows = static_cast<int>((tiles.size() + cols - 1) / cols);
  cv::Mat canvas(rows * tile_h, cols * tile_w, CV_8UC3, cv::Scalar(32, 32, 32));
  for (size_t i = 0; i < tiles.size(); ++i) {
    cv::Mat tile = ToDisplayable(tiles[i].bytes.data(), s, mean, std_dev);
    cv::Mat big;
    cv::resize(tile, big, cv::Size(), scale, scale, cv::INTER_NEAREST);
    const int x = static_cast<int>(i % cols) * tile_w, y = static_cast<int>(i / cols) * tile_h;
    big.copyTo(canvas(cv::Rect(x + (tile_w - big.cols) / 2, y, big.cols, big.rows)));
    cv::putText(canvas, tiles[i].caption, cv::Point(x + 3, y + tile_h - 5),
                cv::FONT_HERSHEY_SIMPLEX, 0.38, cv::Scalar(235, 235, 235), 1, cv::LINE_AA);
  }
  try {
    if (!cv::imwrite(png_path, canvas)) return Status::IOError("cannot write " + png_path);
  } catch (const cv::Exception& e) {
    return Status::IOError("cannot write " + png_path + ": " + e.what());
  }
  return Status::Ok();
}

// A JPEG record (`kiln pack --codec jpeg`) shown whole: records keep their own sizes (at most
// the max side), so each is decoded at full scale and placed at the top left of a tile of the
// dataset's max side x max side schema, the rest dark grey.
class WholeJpegTile final : public ImageRecordDecoder {
 public:
  WholeJpegTile(const TensorSchema& s, uint32_t max_side) : s_(s), jpeg_(s.channels, max_side) {}
  Status DecodeImage(const uint8_t* stored, size_t stored_size, uint32_t /*raw_size*/,
                     uint8_t* out) override {
    KILN_ASSIGN_OR_RETURN(JpegInfo info, jpeg_.DecodeFull(stored, stored_size, &pixels_));
    if (info.height > s_.height || info.width > s_.width) {
      return Status::Corruption("JPEG image " + std::to_string(info.width) + "x" +
                                std::to_string(info.height) + " exceeds the max side " +
                                std::to_string(s_.height));
    }
    std::memset(out, 32, s_.sample_bytes());
    const size_t row = size_t(info.width) * s_.channels;
    for (uint32_t y = 0; y < info.height; ++y) {
      std::memcpy(out + size_t(y) * s_.width * s_.channels, pixels_.data() + y * row, row);
    }
    return Status::Ok();
  }
  Status ValidateImage(const uint8_t* stored, size_t stored_size, uint32_t raw_size,
                       uint8_t* scratch) override {
    return jpeg_.ValidateImage(stored, stored_size, raw_size, scratch);
  }

 private:
  TensorSchema s_;
  JpegSampleDecoder jpeg_;
  std::vector<uint8_t> pixels_;
};

}  // namespace

Status RenderSamples(const std::string& dir, const std::vector<uint64_t>& indices, uint32_t columns,
                     const std::string& png_path) {
  if (indices.empty() || columns == 0) return Status::InvalidArgument("nothing to show");
  EnableRemoteDatasets();  // this plugin has its own copy of Dataset::Open's opener
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> dataset, Dataset::Open(dir));
  const TensorSchema& s = dataset->schema();
  std::array<float, 3> mean, std_dev;
  RecordedNormalisation(*dataset, &mean, &std_dev);
  RecordDecoder decoder;
  std::unique_ptr<WholeJpegTile> whole;
  if (dataset->jpeg_records()) {
    whole = std::make_unique<WholeJpegTile>(s, dataset->jpeg_max_side());
    decoder.set_image_decoder(whole.get());
  }
  std::vector<Tile> tiles(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    int64_t label = 0;
    tiles[i].bytes.resize(s.sample_bytes());
    KILN_RETURN_IF_ERROR(dataset->ReadSample(indices[i], &decoder, tiles[i].bytes.data(), &label));
    tiles[i].caption = ClassName(*dataset, label);
  }
  return WriteGrid(tiles, s, columns, mean, std_dev, png_path);
}

Status RenderAugmentedDraws(const std::string& dir, uint64_t index, const AugmentOptions& augment,
                            uint64_t seed, uint32_t draws, uint32_t columns,
                            const std::string& png_path) {
  if (draws == 0 || columns == 0) return Status::InvalidArgument("nothing to show");
  if (!augment.enabled()) {
    return Status::InvalidArgument(
        "--draws shows augmented draws, but no augmentation was given (--crop, "
        "--random-resized-crop or --flip)");
  }
  EnableRemoteDatasets();
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> dataset, Dataset::Open(dir));
  const TensorSchema& stored = dataset->schema();
  if (index >= dataset->num_samples()) {
    return Status::OutOfRange("--index " + std::to_string(index) + " is out of range: " + dir +
                              " holds " + std::to_string(dataset->num_samples()) + " samples");
  }
  KILN_ASSIGN_OR_RETURN(TensorSchema out, AugmentedSchema(stored, augment));
  std::array<float, 3> mean, std_dev;
  RecordedNormalisation(*dataset, &mean, &std_dev);
  RecordDecoder decoder;
  if (dataset->jpeg_records()) {
    // JPEG records: each epoch's draw is made on the record's own image size by the loader's
    // own decoder (reader/jpeg_sample_decoder.h), so the tiles are what training sees.
    if (!augment.resamples()) {
      return Status::InvalidArgument(
          dir + " holds JPEG records of different sizes: --draws needs --random-resized-crop");
    }
    std::vector<Tile> tiles(draws);
    for (uint32_t e = 0; e < draws; ++e) {
      JpegSampleDecoder jpeg(stored.channels, augment, out.height, out.width, seed,
                             dataset->jpeg_max_side());
      jpeg.SetSample(e, index);
      decoder.set_image_decoder(&jpeg);
      int64_t label = 0;
      tiles[e].bytes.resize(out.sample_bytes());
      KILN_RETURN_IF_ERROR(dataset->ReadSample(index, &decoder, tiles[e].bytes.data(), &label));
      decoder.set_image_decoder(nullptr);
      tiles[e].caption = "epoch " + std::to_string(e);
    }
    return WriteGrid(tiles, out, columns, mean, std_dev, png_path);
  }
  std::vector<uint8_t> sample(stored.sample_bytes());
  int64_t label = 0;
  KILN_RETURN_IF_ERROR(dataset->ReadSample(index, &decoder, sample.data(), &label));
  // Epoch e's draw is the one the loader makes for this sample in epoch e (the same functions:
  // reader/augmenter.h), so the picture is exactly what training sees.
  std::vector<Tile> tiles(draws);
  for (uint32_t e = 0; e < draws; ++e) {
    const AugmentParams params = DrawAugmentParams(stored, augment, seed, e, index);
    tiles[e].bytes.resize(out.sample_bytes());
    ApplyAugment(sample.data(), stored, params, out, tiles[e].bytes.data());
    tiles[e].caption = "epoch " + std::to_string(e) + (params.flip ? " flip" : "");
  }
  return WriteGrid(tiles, out, columns, mean, std_dev, png_path);
}

}  // namespace kiln
