// How far shrink-on-load (tools/imaging/shrink_on_load.h) is from the full decode, and how much
// faster: for each JPEG given, packs it to the schema twice, once decoded at full size and once at
// the IDCT scale the rule picks, with the same Preprocess, and prints one JSON line per file
// (scale, max and mean absolute difference, PSNR, CPU milliseconds of each decode +
// preprocess) and a last line with the totals (PSNR of all files' pixels together).
//
//   shrink_on_load_quality [--size S] [--crop center|none] [--repeat R] FILE.jpg...
//
// Used for tools/imaging/decode_policy.md, "Shrink on load", on Debian's
// plasma-workspace-wallpapers.
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tools/imaging/image_decoder.h"
#include "tools/imaging/jpeg_decoder.h"
#include "tools/imaging/preprocessor.h"
#include "tools/imaging/shrink_on_load.h"

namespace {

double CpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Decodes and preprocesses `bytes` `repeat` times; returns the CPU ms of the fastest run.
double PackOne(const std::string& bytes, const std::string& path, const kiln::DecodeOptions& d,
               const kiln::PreprocessOptions& p, int repeat, std::vector<uint8_t>* out, bool* ok) {
  double best = 1e30;
  *ok = true;
  for (int r = 0; r < repeat; ++r) {
    const double t0 = CpuMs();
    cv::Size full;
    kiln::Result<cv::Mat> image = kiln::DecodeImage(bytes, path, d, &full);
    if (!image.ok()) {
      std::fprintf(stderr, "%s\n", image.status().ToString().c_str());
      *ok = false;
      return 0;
    }
    if (!kiln::Preprocess(*image, p, path, out->data(), full).ok()) *ok = false;
    best = std::min(best, CpuMs() - t0);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  kiln::PreprocessOptions p;
  uint32_t size = 224;
  int repeat = 3;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--size" && i + 1 < argc) {
      size = static_cast<uint32_t>(std::atoi(argv[++i]));
    } else if (a == "--crop" && i + 1 < argc) {
      p.crop =
          std::strcmp(argv[++i], "none") == 0 ? kiln::CropMode::kNone : kiln::CropMode::kCenter;
    } else if (a == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else {
      files.push_back(a);
    }
  }
  p.schema = {kiln::DType::kUint8, kiln::Layout::kCHW, size, size, 3};
  std::vector<uint8_t> exact(p.schema.sample_bytes()), shrunk(p.schema.sample_bytes());
  double total_sq = 0, total_abs = 0, total_exact_ms = 0, total_shrink_ms = 0;
  uint64_t total_n = 0;
  int total_max = 0;
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    const kiln::DecodeOptions full;
    const kiln::DecodeOptions shrink = kiln::ShrinkOnLoadDecodeOptions(bytes, full, p);
    bool ok1, ok2;
    const double exact_ms = PackOne(bytes, path, full, p, repeat, &exact, &ok1);
    const double shrink_ms = PackOne(bytes, path, shrink, p, repeat, &shrunk, &ok2);
    if (!ok1 || !ok2) continue;
    cv::Size full_size;
    kiln::Result<cv::Mat> small = kiln::DecodeImage(bytes, path, shrink, &full_size);
    double sq = 0, abs_sum = 0;
    int max_diff = 0;
    for (size_t k = 0; k < exact.size(); ++k) {
      const int diff = std::abs(int{exact[k]} - int{shrunk[k]});
      sq += double(diff) * diff;
      abs_sum += diff;
      max_diff = std::max(max_diff, diff);
    }
    const double mse = sq / exact.size();
    std::printf(
        "{\"file\": \"%s\", \"full\": [%d, %d], \"decoded\": [%d, %d], \"max_abs\": %d, "
        "\"mean_abs\": %.3f, \"psnr_db\": %.2f, \"exact_ms\": %.1f, \"shrink_ms\": %.1f}\n",
        path.c_str(), full_size.width, full_size.height, small->cols, small->rows, max_diff,
        abs_sum / exact.size(), mse == 0 ? 99.0 : 10 * std::log10(255.0 * 255.0 / mse), exact_ms,
        shrink_ms);
    total_sq += sq;
    total_abs += abs_sum;
    total_n += exact.size();
    total_max = std::max(total_max, max_diff);
    total_exact_ms += exact_ms;
    total_shrink_ms += shrink_ms;
  }
  if (total_n == 0) return 1;
  const double mse = total_sq / total_n;
  std::printf(
      "{\"files\": %zu, \"size\": %u, \"max_abs\": %d, \"mean_abs\": %.3f, \"psnr_db\": %.2f, "
      "\"exact_ms\": %.1f, \"shrink_ms\": %.1f, \"cpu_speedup\": %.2f}\n",
      files.size(), size, total_max, total_abs / total_n,
      mse == 0 ? 99.0 : 10 * std::log10(255.0 * 255.0 / mse), total_exact_ms, total_shrink_ms,
      total_exact_ms / total_shrink_ms);
  return 0;
}
