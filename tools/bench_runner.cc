#include "tools/bench_runner.h"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "reader/sampler.h"

namespace kiln {

namespace {
double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

Result<BenchReport> RunBench(const std::string& dir, const BenchOptions& options) {
  BenchReport r;
  r.dir = dir;
  const auto open_start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Loader> loader, Loader::Open(dir, options.loader));
  r.open_seconds = SecondsSince(open_start);
  r.threads = loader->num_threads();
  r.prefetch = options.loader.prefetch;
  r.batch_size = options.loader.batch_size;
  r.pinned = loader->pinned();
  r.epochs = options.epochs;
  const uint64_t n = loader->dataset().num_samples();
  std::vector<uint8_t> seen(n, 0);
  uint64_t first_epoch_samples = 0;
  bool duplicates = false;
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t e = 0; e < options.epochs; ++e) {
    loader->SetEpoch(options.loader.start_epoch + e);
    Batch batch;
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool more, loader->Next(&batch));
      if (!more) break;
      if (r.batches == 0) r.first_batch_seconds = SecondsSince(open_start);
      ++r.batches;
      r.samples += batch.size;
      r.bytes += batch.bytes();
      for (uint32_t k = 0; k < batch.size; ++k) {
        r.checksum ^= SplitMix64Mix(batch.sample_indices[k] * 0x100000001B3ull ^
                                    static_cast<uint64_t>(batch.labels[k]));
        if (e == 0) {
          ++first_epoch_samples;
          if (!batch.is_padding[k]) {
            duplicates |= seen[batch.sample_indices[k]] != 0;
            seen[batch.sample_indices[k]] = 1;
          }
        }
      }
    }
  }
  r.seconds = SecondsSince(start);
  const LoaderStats stats = loader->stats();
  const uint64_t expected = loader->samples_per_epoch();
  r.every_sample_once = !duplicates && first_epoch_samples == expected;
  r.samples_per_s = r.seconds > 0 ? r.samples / r.seconds : 0;
  r.mb_per_s = r.seconds > 0 ? r.bytes / 1e6 / r.seconds : 0;
  r.consumer_wait_fraction = r.seconds > 0 ? stats.consumer_wait_ns / 1e9 / r.seconds : 0;
  return r;
}

std::string BenchReportJson(const BenchReport& r) {
  nlohmann::ordered_json j;
  j["dir"] = r.dir;
  j["samples"] = r.samples;
  j["bytes"] = r.bytes;
  j["batches"] = r.batches;
  j["epochs"] = r.epochs;
  j["seconds"] = r.seconds;
  j["samples_per_s"] = r.samples_per_s;
  j["mb_per_s"] = r.mb_per_s;
  j["open_seconds"] = r.open_seconds;
  j["first_batch_seconds"] = r.first_batch_seconds;
  j["consumer_wait_fraction"] = r.consumer_wait_fraction;
  j["threads"] = r.threads;
  j["prefetch"] = r.prefetch;
  j["batch_size"] = r.batch_size;
  j["pinned"] = r.pinned;
  j["every_sample_once"] = r.every_sample_once;
  j["checksum"] = r.checksum;
  return j.dump();
}

std::string BenchReportText(const BenchReport& r) {
  char line[512];
  std::snprintf(line, sizeof(line),
                "read %llu samples (%u epochs, %llu batches of %u) in %.3f s: %.0f samples/s, "
                "%.1f MB/s; %u threads, prefetch %u, %s memory; open %.1f ms, first batch "
                "%.1f ms; every sample read once: %s\n",
                static_cast<unsigned long long>(r.samples), r.epochs,
                static_cast<unsigned long long>(r.batches), r.batch_size, r.seconds,
                r.samples_per_s, r.mb_per_s, r.threads, r.prefetch,
                r.pinned ? "pinned" : "pageable", r.open_seconds * 1e3,
                r.first_batch_seconds * 1e3, r.every_sample_once ? "yes" : "NO");
  return line;
}

}  // namespace kiln
