#include "tools/imaging/wait_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

namespace kiln {

namespace {

constexpr int kWidth = 1000;
constexpr int kLeft = 70, kTop = 44, kRight = 850;
constexpr int kLinesHeight = 520, kBelow = 60;
const cv::Scalar kInk(0, 0, 0);
const cv::Scalar kGrid(225, 225, 225);
const cv::Scalar kMissing(128, 128, 128);
constexpr double kFont = 0.45;

void Label(cv::Mat& canvas, const std::string& text, int x, int y, double scale = kFont) {
  cv::putText(canvas, text, cv::Point(x, y), cv::FONT_HERSHEY_SIMPLEX, scale, kInk, 1, cv::LINE_AA);
}

int TextWidth(const std::string& text) {
  int baseline = 0;
  return cv::getTextSize(text, cv::FONT_HERSHEY_SIMPLEX, kFont, 1, &baseline).width;
}

// A round tick step (1, 2 or 5 x 10^k) giving at most about 8 ticks over `span`.
double TickStep(double span) {
  const double raw = span / 8;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), v == std::floor(v) ? "%.0f" : "%.1f", v);
  return buf;
}

// The time axis under the plot area: ticks, their labels, and its name.
void TimeAxis(cv::Mat& canvas, const WaitPlotLayout& l, double seconds) {
  const double step = TickStep(seconds);
  for (double t = 0; t <= seconds * (1 + 1e-9); t += step) {
    const int x = l.left + static_cast<int>(std::lround(t / seconds * (l.right - l.left)));
    cv::line(canvas, {x, l.bottom}, {x, l.bottom + 5}, kInk, 1, cv::LINE_8);
    const std::string s = Number(t);
    Label(canvas, s, x - TextWidth(s) / 2, l.bottom + 20);
  }
  const std::string name = "time since the first stats line (s)";
  Label(canvas, name, (l.left + l.right - TextWidth(name)) / 2, l.bottom + 42);
}

void DrawLines(cv::Mat& canvas, const WaitPlot& plot, const WaitPlotLayout& l) {
  const size_t n = plot.share.front().size();
  const int w = l.right - l.left, h = l.bottom - l.top;
  for (int pct = 0; pct <= 100; pct += 20) {
    const int y = l.bottom - h * pct / 100;
    if (pct > 0) cv::line(canvas, {l.left, y}, {l.right - 1, y}, kGrid, 1, cv::LINE_8);
    cv::line(canvas, {l.left - 5, y}, {l.left, y}, kInk, 1, cv::LINE_8);
    const std::string s = std::to_string(pct) + "%";
    Label(canvas, s, l.left - 9 - TextWidth(s), y + 5);
  }
  Label(canvas, "wait share: time the training loop waited for data", l.left, l.top - 8);
  auto point = [&](size_t k, double share) {
    const double s = std::clamp(share, 0.0, 1.0);
    return cv::Point(l.left + static_cast<int>((k + 0.5) * w / n),
                     l.bottom - 1 - static_cast<int>(std::lround(s * (h - 1))));
  };
  for (size_t i = 0; i < plot.share.size(); ++i) {
    const std::array<uint8_t, 3> c = WaitPlotColor(i);
    const cv::Scalar colour(c[0], c[1], c[2]);
    const std::vector<double>& row = plot.share[i];
    for (size_t k = 0; k < n; ++k) {
      if (std::isnan(row[k])) continue;
      const bool prev = k > 0 && !std::isnan(row[k - 1]);
      const bool next = k + 1 < n && !std::isnan(row[k + 1]);
      if (prev) cv::line(canvas, point(k - 1, row[k - 1]), point(k, row[k]), colour, 2, cv::LINE_8);
      if (!prev && !next) cv::circle(canvas, point(k, row[k]), 3, colour, cv::FILLED, cv::LINE_8);
    }
    // Legend, right of the plot area.
    const int y = l.top + 10 + 20 * static_cast<int>(i);
    cv::rectangle(canvas, {l.right + 20, y - 8}, {l.right + 40, y + 2}, colour, cv::FILLED,
                  cv::LINE_8);
    Label(canvas, plot.series[i], l.right + 46, y + 2);
  }
}

void DrawHeatmap(cv::Mat& canvas, const WaitPlot& plot, const WaitPlotLayout& l) {
  cv::Mat ramp(256, 1, CV_8UC1), lut;
  for (int v = 0; v < 256; ++v) ramp.at<uint8_t>(v, 0) = static_cast<uint8_t>(v);
  cv::applyColorMap(ramp, lut, cv::COLORMAP_INFERNO);
  auto colour = [&](double share) {
    if (std::isnan(share)) return kMissing;
    const int v = static_cast<int>(std::lround(std::clamp(share, 0.0, 1.0) * 255));
    const cv::Vec3b c = lut.at<cv::Vec3b>(v, 0);
    return cv::Scalar(c[0], c[1], c[2]);
  };
  const size_t n = plot.share.front().size();
  const int w = l.right - l.left;
  for (size_t i = 0; i < plot.share.size(); ++i) {
    const int y0 = l.top + static_cast<int>(i) * l.row_height;
    for (size_t k = 0; k < n; ++k) {
      const int x0 = l.left + static_cast<int>(k * w / n);
      const int x1 = l.left + static_cast<int>((k + 1) * w / n);
      cv::rectangle(canvas, {x0, y0}, {x1 - 1, y0 + l.row_height - 1}, colour(plot.share[i][k]),
                    cv::FILLED, cv::LINE_8);
    }
  }
  // Row labels, as many as fit (every `every`-th rank).
  const int every = std::max(1, 14 / l.row_height + (14 % l.row_height ? 1 : 0));
  for (size_t i = 0; i < plot.series.size(); i += every) {
    const int y = l.top + static_cast<int>(i) * l.row_height + l.row_height / 2 + 4;
    const std::string& s = plot.series[i];
    cv::line(canvas, {l.left - 4, y - 4}, {l.left, y - 4}, kInk, 1, cv::LINE_8);
    Label(canvas, s, l.left - 8 - TextWidth(s), y);
  }
  Label(canvas, "wait share per rank (rows): time the training loop waited for data", l.left,
        l.top - 8);
  // Colour bar: 0% at the bottom, 100% at the top.
  const int bx = l.right + 30, bh = l.bottom - l.top;
  for (int y = 0; y < bh; ++y) {
    cv::line(canvas, {bx, l.bottom - 1 - y}, {bx + 16, l.bottom - 1 - y},
             colour(bh > 1 ? static_cast<double>(y) / (bh - 1) : 1.0), 1, cv::LINE_8);
  }
  Label(canvas, "100%", bx + 22, l.top + 10);
  Label(canvas, "0%", bx + 22, l.bottom);
}

}  // namespace

WaitPlotLayout LayoutWaitPlot(const WaitPlot& plot) {
  WaitPlotLayout l;
  l.width = kWidth;
  l.left = kLeft;
  l.top = kTop;
  l.right = kRight;
  l.heatmap = plot.series.size() > kWaitPlotMaxLines;
  if (l.heatmap) {
    const int n = static_cast<int>(plot.series.size());
    l.row_height = std::clamp(400 / std::max(n, 1), 2, 16);
    l.bottom = l.top + n * l.row_height;
  } else {
    l.bottom = kLinesHeight - kBelow;
  }
  l.height = l.bottom + kBelow;
  return l;
}

std::array<uint8_t, 3> WaitPlotColor(size_t series) {
  static constexpr std::array<uint8_t, 3> kColours[kWaitPlotMaxLines] = {
      {{180, 119, 31}},  {{14, 127, 255}}, {{44, 160, 44}},   {{40, 39, 214}},
      {{189, 103, 148}}, {{75, 86, 140}},  {{194, 119, 227}}, {{34, 189, 188}},
      {{207, 190, 23}},  {{128, 0, 0}},    {{0, 100, 0}},     {{0, 0, 128}}};
  return kColours[series % kWaitPlotMaxLines];
}

Status RenderWaitPlot(const WaitPlot& plot, const std::string& path) {
  if (plot.series.empty() || plot.share.size() != plot.series.size() ||
      plot.share.front().empty()) {
    return Status::InvalidArgument("wait plot: no ranks or no intervals to draw");
  }
  for (const std::vector<double>& row : plot.share) {
    if (row.size() != plot.share.front().size()) {
      return Status::InvalidArgument("wait plot: ranks with different numbers of intervals");
    }
  }
  if (!(plot.bucket_seconds > 0)) {
    return Status::InvalidArgument("wait plot: the interval must be > 0 s");
  }
  const WaitPlotLayout l = LayoutWaitPlot(plot);
  cv::Mat canvas(l.height, l.width, CV_8UC3, cv::Scalar(255, 255, 255));
  Label(canvas, plot.title, l.left, 18, 0.55);
  if (l.heatmap) {
    DrawHeatmap(canvas, plot, l);
  } else {
    DrawLines(canvas, plot, l);
  }
  cv::rectangle(canvas, {l.left - 1, l.top - 1}, {l.right, l.bottom}, kInk, 1, cv::LINE_8);
  TimeAxis(canvas, l, plot.bucket_seconds * plot.share.front().size());
  try {
    if (!cv::imwrite(path, canvas)) return Status::IOError("cannot write " + path);
  } catch (const cv::Exception& e) {
    return Status::IOError("cannot write " + path + ": " + e.what());
  }
  return Status::Ok();
}

}  // namespace kiln
