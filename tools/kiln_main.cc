// The `kiln` command line: parses flags with CLI11, calls one library function per subcommand,
// prints results on stdout (JSON with --json) and diagnostics on stderr.
// Exit codes: 0 success, 1 the data has problems, 2 usage error.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "formats/verifier.h"
#include "tools/bench_runner.h"
#include "tools/cli_parsing.h"
#include "formats/inspector.h"
#include "tools/packer.h"
#include "tools/sample_renderer.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitDataProblem = 1;
constexpr int kExitUsage = 2;

bool g_json = false;  // --json of the parsed subcommand
constexpr int kExitInterrupted = 130;  // 128 + SIGINT, as shells report it

std::atomic<bool> g_interrupted{false};
extern "C" void OnInterrupt(int) { g_interrupted.store(true); }

// Reports a failed command: the message on stderr and, with --json, {"ok": false, "error": ...}
// on stdout so scripts always get one JSON object.
int Fail(const kiln::Status& status) {
  std::fprintf(stderr, "kiln: %s\n", status.message().c_str());
  const int code = status.code() == kiln::StatusCode::kInvalidArgument ? kExitUsage
                   : status.code() == kiln::StatusCode::kCancelled     ? kExitInterrupted
                                                                       : kExitDataProblem;
  if (g_json) {
    std::cout << nlohmann::json{{"ok", false}, {"error", status.message()}, {"exit_code", code}}
                     .dump()
              << "\n";
  }
  return code;
}

// Draws a progress bar on a terminal, or a plain line every 10% elsewhere.
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(::isatty(STDERR_FILENO) != 0) {}
  void operator()(uint64_t done, uint64_t total) {
    if (tty_) {
      if (done != total && done % 64 != 0) return;
      const int width = 40;
      const int filled = total ? static_cast<int>(width * done / total) : width;
      std::fprintf(stderr, "\r[%s%s] %llu/%llu images", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(),
                   static_cast<unsigned long long>(done), static_cast<unsigned long long>(total));
      if (done == total) std::fprintf(stderr, "\n");
      return;
    }
    const uint64_t tenth = total ? done * 10 / total : 10;
    if (tenth > last_tenth_) {
      last_tenth_ = tenth;
      std::fprintf(stderr, "kiln pack: %llu/%llu images (%llu%%)\n",
                   static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
                   static_cast<unsigned long long>(tenth * 10));
    }
  }

 private:
  bool tty_;
  uint64_t last_tenth_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln: pack image folders into ready-to-train tensors, verify them, read them fast"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kiln 0.1.0");

  // kiln pack
  std::string input, output, root, size = "224", crop = "center", layout = "hwc", dtype = "uint8";
  std::string compress = "none", shard_size = "128MiB", on_error = "skip", mean, std_dev;
  uint32_t channels = 3, resize = 0, threads = 0;
  uint64_t max_pixels = kiln::DecodeOptions{}.max_pixels;
  int64_t shuffle_seed = -1;
  bool json = false, overwrite = false;
  CLI::App* pack = app.add_subcommand("pack", "Pack an image folder or list file into a dataset");
  pack->add_option("input", input, "ImageFolder directory (one sub-folder per class) or list file")
      ->required();
  pack->add_option("output", output, "Dataset directory to create")->required();
  pack->add_option("--root", root, "Root of the list file's paths (default: its directory)");
  pack->add_option("--size", size, "Final size H or HxW (default 224)");
  pack->add_option("--resize", resize, "Shorter side before the crop (default: cover --size)");
  pack->add_option("--crop", crop, "center or none (resize to --size, aspect not kept)")
      ->check(CLI::IsMember({"center", "none"}));
  pack->add_option("--channels", channels, "1 (grey) or 3 (RGB)")->check(CLI::IsMember({1, 3}));
  pack->add_option("--layout", layout, "hwc or chw")->check(CLI::IsMember({"hwc", "chw"}));
  pack->add_option("--dtype", dtype, "uint8, float16 or float32")
      ->check(CLI::IsMember({"uint8", "float16", "float32"}));
  pack->add_option("--mean", mean, "Per-channel mean in [0,1] for float dtypes, e.g. 0.485,0.456,0.406");
  pack->add_option("--std", std_dev, "Per-channel std for float dtypes, e.g. 0.229,0.224,0.225");
  std::string format = "shards";
  pack->add_option("--format", format, "Storage format: shards (default), lmdb or hdf5")
      ->check(CLI::IsMember({"shards", "lmdb", "hdf5"}));
  pack->add_option("--shard-size", shard_size, "Maximum shard size, e.g. 64MiB (default 128MiB)");
  pack->add_option("--compress", compress, "none, zstd or zstd:LEVEL (per record)");
  pack->add_option("--threads", threads, "Worker threads (default: all cores)")
      ->check(CLI::Range(0u, 256u));
  pack->add_option("--shuffle-seed", shuffle_seed, "Shuffle samples at write time with this seed");
  pack->add_option("--on-error", on_error, "skip (report and go on) or fail (stop, write nothing)")
      ->check(CLI::IsMember({"skip", "fail"}));
  pack->add_option("--max-pixels", max_pixels, "Refuse images with more pixels (0: no limit)");
  pack->add_flag("--overwrite", overwrite, "Replace an existing dataset at OUTPUT");
  bool resume = false;
  pack->add_flag("--resume", resume,
                 "Continue an interrupted pack of the same inputs and options (shards format)");
  pack->add_flag("--json", json, "Print one JSON object on stdout");

  // kiln verify
  std::string dataset;
  bool deep = false;
  CLI::App* verify = app.add_subcommand("verify", "Check a dataset: structure, checksums, counts");
  verify->add_option("dataset", dataset, "Dataset directory")->required();
  verify->add_flag("--deep", deep, "Also decompress every record and check its size");
  verify->add_flag("--json", json, "Print one JSON object on stdout");

  // kiln inspect
  CLI::App* inspect = app.add_subcommand("inspect", "Describe a dataset");
  inspect->add_option("dataset", dataset, "Dataset directory")->required();
  inspect->add_flag("--json", json, "Print one JSON object on stdout");

  // kiln show
  uint64_t index = 0;
  std::string grid, png;
  CLI::App* show = app.add_subcommand("show", "Write samples as a PNG picture");
  show->add_option("dataset", dataset, "Dataset directory")->required();
  auto* index_opt = show->add_option("--index", index, "One sample index");
  auto* grid_opt = show->add_option("--grid", grid, "RxC grid of evenly spaced samples, e.g. 4x8");
  index_opt->excludes(grid_opt);
  show->add_option("-o,--output", png, "PNG file to write")->required();

  // kiln bench
  kiln::BenchOptions bench_options;
  bool no_shuffle = false;
  uint32_t bench_threads = 0;
  CLI::App* bench = app.add_subcommand("bench", "Measure how fast the reader streams a dataset");
  bench->add_option("dataset", dataset, "Dataset directory")->required();
  bench->add_option("--batch-size", bench_options.loader.batch_size, "Samples per batch (256)");
  bench->add_option("--threads", bench_threads, "Fetch threads (default: all cores)")
      ->check(CLI::Range(0u, 256u));
  bench->add_option("--prefetch", bench_options.loader.prefetch, "Batches in flight (2)");
  bench->add_option("--epochs", bench_options.epochs, "Epochs to time (3)")
      ->check(CLI::Range(1u, 1000000u));
  bench->add_option("--seed", bench_options.loader.seed, "Shuffle seed (0)");
  bench->add_flag("--no-shuffle", no_shuffle, "Read in dataset order");
  bench->add_flag("--shuffle", "Shuffle (the default)");
  bench->add_flag("--json", json, "Print one JSON object on stdout");
  bool bench_sweep = false;
  bench->add_flag("--sweep", bench_sweep,
                  "Run over thread counts 1, 2, 4, ... (up to 2x cores) and prefetch 1, 2, 4, 8; "
                  "print a table and the recommended setting");
  bench->add_flag("--cold", bench_options.cold,
                  "Drop the dataset files' pages from the page cache before each run");
  uint64_t read_ahead_mib = bench_options.loader.read_ahead_bytes >> 20;
  bench->add_option("--read-ahead-mib", read_ahead_mib,
                    "Stored bytes the fetch threads ask the kernel to read ahead, in MiB; 0 off "
                    "(16)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{4096}));
  bench->add_option("--consumer-ms", bench_options.consumer_ms,
                    "Simulated training step: sleep this many ms per batch (0)")
      ->check(CLI::Range(0.0, 60000.0));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other parse error is a usage error (exit 2).
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }

  g_json = json;
  if (pack->parsed()) {
    kiln::PackOptions o;
    o.input = input;
    o.output = output;
    o.root = root;
    o.threads = threads;
    o.overwrite = overwrite;
    o.resume = resume;
    o.format = format;
    o.on_error = on_error == "fail" ? kiln::OnError::kFail : kiln::OnError::kSkip;
    o.decode.max_pixels = max_pixels;
    if (shuffle_seed >= 0) o.shuffle_seed = static_cast<uint64_t>(shuffle_seed);
    kiln::Status s = kiln::ParsePackFlags(size, resize, crop, channels, layout, dtype, mean,
                                          std_dev, shard_size, compress, &o);
    if (!s.ok()) return Fail(s);
    // Ctrl-C or SIGTERM: stop between images and clean up, rather than die mid-write.
    std::signal(SIGINT, OnInterrupt);
    std::signal(SIGTERM, OnInterrupt);
    o.cancel = &g_interrupted;
    ProgressPrinter printer;
    kiln::Result<kiln::PackReport> report =
        kiln::Pack(o, [&](uint64_t done, uint64_t total) { printer(done, total); });
    if (!report.ok()) return Fail(report.status());
    if (!report->resume_note.empty()) {
      std::fprintf(stderr, "kiln pack: --resume: %s\n", report->resume_note.c_str());
    } else if (report->resumed_inputs > 0) {
      std::fprintf(stderr, "kiln pack: resumed after %llu inputs of an interrupted run\n",
                   static_cast<unsigned long long>(report->resumed_inputs));
    }
    for (const kiln::Rejection& r : report->rejections) {
      std::fprintf(stderr, "kiln pack: rejected %s%s: %s\n", r.path.c_str(),
                   r.line ? (" (line " + std::to_string(r.line) + ")").c_str() : "",
                   r.reason.c_str());
    }
    if (json) {
      std::cout << kiln::PackReportJson(*report) << "\n";
    } else {
      std::printf("packed %llu of %llu images (%llu rejected) into %s: %zu files, %.1f MB in "
                  "%.2f s (%.0f images/s, %.1f MB/s)\n",
                  static_cast<unsigned long long>(report->packed),
                  static_cast<unsigned long long>(report->listed),
                  static_cast<unsigned long long>(report->rejected), report->output.c_str(),
                  report->manifest.files.size(), report->output_bytes / 1e6, report->seconds,
                  report->seconds > 0 ? report->packed / report->seconds : 0.0,
                  report->seconds > 0 ? report->output_bytes / 1e6 / report->seconds : 0.0);
    }
    return kExitOk;
  }
  if (verify->parsed()) {
    kiln::VerifyOptions vo;
    vo.deep = deep;
    const kiln::VerifyReport report = kiln::VerifyDataset(dataset, vo);
    std::cout << (json ? kiln::VerifyReportToJson(report) + "\n" : kiln::VerifyReportToText(report));
    return report.ok() ? kExitOk : kExitDataProblem;
  }
  if (inspect->parsed()) {
    kiln::Result<std::string> text = kiln::Inspect(dataset, json);
    if (!text.ok()) return Fail(text.status());
    std::cout << *text << (json ? "\n" : "");
    return kExitOk;
  }
  if (show->parsed()) {
    std::vector<uint64_t> indices;
    uint32_t columns = 1;
    if (index_opt->count() > 0) {
      kiln::Result<uint64_t> n = kiln::CountSamples(dataset);
      if (!n.ok()) return Fail(n.status());
      if (index >= *n) {
        return Fail(kiln::Status::InvalidArgument(
            "--index " + std::to_string(index) + " is out of range: " + dataset + " holds " +
            std::to_string(*n) + " samples (0 to " + std::to_string(*n - 1) + ")"));
      }
      indices.push_back(index);
    } else {
      uint32_t rows = 0;
      kiln::Status s = kiln::ParseGrid(grid.empty() ? "4x8" : grid, &rows, &columns);
      if (!s.ok()) return Fail(s);
      kiln::Result<uint64_t> n = kiln::CountSamples(dataset);
      if (!n.ok()) return Fail(n.status());
      indices = kiln::EvenlySpacedIndices(*n, uint64_t{rows} * columns);
    }
    kiln::Status s = kiln::RenderSamples(dataset, indices, columns, png);
    if (!s.ok()) return Fail(s);
    std::printf("wrote %zu samples to %s\n", indices.size(), png.c_str());
    return kExitOk;
  }
  if (bench->parsed()) {
    bench_options.loader.shuffle = !no_shuffle;
    bench_options.loader.num_threads = bench_threads;
    bench_options.loader.read_ahead_bytes = read_ahead_mib << 20;
    if (bench_sweep) {
      kiln::Result<kiln::SweepReport> sweep = kiln::RunSweep(
          dataset, bench_options, std::max(1u, std::thread::hardware_concurrency()));
      if (!sweep.ok()) return Fail(sweep.status());
      if (json) {
        std::cout << kiln::SweepReportJson(*sweep) << "\n";
      } else {
        std::cout << kiln::BenchReportText(sweep->runs[sweep->recommended])
                  << kiln::SweepReportText(*sweep);
      }
      bool all_once = true;
      for (const kiln::BenchReport& r : sweep->runs) all_once &= r.every_sample_once;
      return all_once ? kExitOk : kExitDataProblem;
    }
    kiln::Result<kiln::BenchReport> report = kiln::RunBench(dataset, bench_options);
    if (!report.ok()) return Fail(report.status());
    std::cout << (json ? kiln::BenchReportJson(*report) + "\n" : kiln::BenchReportText(*report));
    return report->every_sample_once ? kExitOk : kExitDataProblem;
  }
  return kExitUsage;
}
