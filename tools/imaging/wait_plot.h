// kiln::RenderWaitPlot: the picture of `kiln stats --png`: the share of time each rank's training
// loop waited for data, per interval, over the run.
//
// Up to kWaitPlotMaxLines ranks: one line per rank (colour WaitPlotColor(i), drawn without
// anti-aliasing, so each line's pixels are exactly its colour), y = wait share 0-100% (up),
// x = time since the first line of the export, a legend on the right. More ranks: a heatmap, one
// row per rank from the top, one column per interval, dark (0%) to bright (100%, the inferno
// colour map), missing intervals mid grey, and a colour bar on the right. Both have a title,
// axis labels and ticks. The picture's size and its plot area are WaitPlotLayout's.
// Thread safety: reentrant.
#ifndef KILN_TOOLS_IMAGING_WAIT_PLOT_H_
#define KILN_TOOLS_IMAGING_WAIT_PLOT_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"

namespace kiln {

inline constexpr size_t kWaitPlotMaxLines = 12;

struct WaitPlot {
  std::string title;
  std::vector<std::string> series;  // one per rank, its label ("rank 2"), top to bottom
  double bucket_seconds = 0;        // width of one interval, seconds, > 0
  // share[i][k]: series i's wait share in interval k, in [0, 1] (larger values are drawn at 1);
  // NaN where the rank has no data. Every row has the same length, the number of intervals.
  std::vector<std::vector<double>> share;
};

// Where things are, in pixels: the whole picture and the plot area inside the axes
// ([left, right) x [top, bottom)); heatmap rows are row_height pixels from `top`.
struct WaitPlotLayout {
  int width = 0, height = 0;
  int left = 0, top = 0, right = 0, bottom = 0;
  bool heatmap = false;
  int row_height = 0;  // heatmap only
};
WaitPlotLayout LayoutWaitPlot(const WaitPlot& plot);

// The line colour of series i, blue-green-red order as OpenCV stores pixels.
std::array<uint8_t, 3> WaitPlotColor(size_t series);

// Writes the picture to `path` (PNG; the extension picks the format, as cv::imwrite does).
// Errors: InvalidArgument for no series or intervals, rows of different lengths or
// bucket_seconds <= 0; IOError naming `path` when it cannot be written.
Status RenderWaitPlot(const WaitPlot& plot, const std::string& path);

}  // namespace kiln

#endif  // KILN_TOOLS_IMAGING_WAIT_PLOT_H_
