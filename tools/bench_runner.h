// kiln::RunBench: drives a Loader over a dataset for `kiln bench` and measures throughput.
//
// The consumer touches nothing but the batch handles, so the figures are the loader's own rate
// (what a training step that never waits would see). The first epoch also proves that every
// sample of this rank was delivered exactly once.
// Thread safety: reentrant.
#ifndef KILN_TOOLS_BENCH_RUNNER_H_
#define KILN_TOOLS_BENCH_RUNNER_H_

#include <cstdint>
#include <string>

#include "formats/status.h"
#include "reader/loader.h"

namespace kiln {

struct BenchOptions {
  LoaderOptions loader;
  uint32_t epochs = 3;  // epochs timed after opening. Default 3.
};

struct BenchReport {
  std::string dir;
  uint64_t samples = 0;  // samples delivered over all epochs
  uint64_t bytes = 0;    // sample bytes delivered
  uint64_t batches = 0;
  uint32_t epochs = 0;
  uint32_t threads = 0;
  uint32_t prefetch = 0;
  uint32_t batch_size = 0;
  bool pinned = false;
  double open_seconds = 0;         // Dataset::Open + Loader::Create
  double first_batch_seconds = 0;  // from Create's start to the first batch
  double seconds = 0;              // all epochs, from the first Next() to the end
  double samples_per_s = 0;
  double mb_per_s = 0;             // 10^6 bytes per second
  double consumer_wait_fraction = 0;  // share of `seconds` the consumer waited for batches
  bool every_sample_once = false;  // epoch 0 delivered each of this rank's samples exactly once
  uint64_t checksum = 0;           // XOR-folded hash of all labels and sample indices delivered
};

// Errors: as Loader::Open, and the first error a batch carries.
Result<BenchReport> RunBench(const std::string& dir, const BenchOptions& options);

// One JSON object: samples, seconds, samples_per_s, mb_per_s and the other fields.
std::string BenchReportJson(const BenchReport& report);
// One human-readable line.
std::string BenchReportText(const BenchReport& report);

}  // namespace kiln

#endif  // KILN_TOOLS_BENCH_RUNNER_H_
