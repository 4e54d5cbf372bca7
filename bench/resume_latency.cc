// resume_latency: time from a saved reader state to the first batch of the restored loader
// (BENCHMARKS.md, "Restore time").
//
//   resume_latency DATASET [BATCH=256] [ROUNDS=5]
//
// Reads one epoch up to its last batch, saves Loader::state() as its 96 bytes, destroys the
// loader; then, ROUNDS times: decodes the bytes, opens the dataset, creates a loader with
// LoaderOptions::resume and waits for its first batch (the epoch's last), printing the
// milliseconds of each part. For comparison it also times a fresh open to the first batch of
// an epoch. The dataset's pages are warm (the first pass read them).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "reader/loader.h"

namespace {
double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return std::fprintf(stderr, "usage: resume_latency DATASET [BATCH] [ROUNDS]\n"), 2;
  const std::string dir = argv[1];
  kiln::LoaderOptions o;
  o.batch_size = argc > 2 ? static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10)) : 256;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  o.num_threads = 2;
  o.pin_memory = false;
  o.seed = 3;
  std::string blob;
  uint64_t last_index = 0;
  {
    auto loader = kiln::Loader::Open(dir, o);
    if (!loader.ok()) return std::fprintf(stderr, "%s\n", loader.status().ToString().c_str()), 1;
    const uint64_t batches = (*loader)->batches_per_epoch();
    kiln::Batch b;
    for (uint64_t i = 0; i + 1 < batches; ++i) {
      auto r = (*loader)->Next(&b);
      if (!r.ok() || !*r) return std::fprintf(stderr, "read failed at batch %lu\n", i), 1;
    }
    blob = (*loader)->state().Encode();
    last_index = batches - 1;
    std::printf(
        "dataset %s: %lu samples, %lu batches of %u; state saved before batch %lu "
        "(%zu bytes)\n",
        dir.c_str(), (*loader)->dataset().num_samples(), batches, o.batch_size, last_index,
        blob.size());
  }
  std::vector<double> decode_ms, create_ms, first_ms, total_ms, fresh_ms;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto state = kiln::ReaderState::Decode(blob);
    if (!state.ok()) return std::fprintf(stderr, "%s\n", state.status().ToString().c_str()), 1;
    const auto t1 = std::chrono::steady_clock::now();
    kiln::LoaderOptions restore = o;
    restore.resume = *state;
    auto loader = kiln::Loader::Open(dir, restore);
    if (!loader.ok()) return std::fprintf(stderr, "%s\n", loader.status().ToString().c_str()), 1;
    const auto t2 = std::chrono::steady_clock::now();
    kiln::Batch b;
    auto got = (*loader)->Next(&b);
    const auto t3 = std::chrono::steady_clock::now();
    if (!got.ok() || !*got || b.index != last_index) {
      return std::fprintf(stderr, "restored loader did not serve batch %lu\n", last_index), 1;
    }
    loader->reset();
    const auto t4 = std::chrono::steady_clock::now();
    auto fresh = kiln::Loader::Open(dir, o);
    if (!fresh.ok() || !(*fresh)->Next(&b).ok()) return 1;
    const auto t5 = std::chrono::steady_clock::now();
    decode_ms.push_back(Ms(t0, t1));
    create_ms.push_back(Ms(t1, t2));
    first_ms.push_back(Ms(t2, t3));
    total_ms.push_back(Ms(t0, t3));
    fresh_ms.push_back(Ms(t4, t5));
    std::printf(
        "round %d: decode %.3f ms, open + create %.2f ms, first batch %.2f ms, total "
        "%.2f ms; fresh open to first batch %.2f ms\n",
        r, Ms(t0, t1), Ms(t1, t2), Ms(t2, t3), Ms(t0, t3), Ms(t4, t5));
  }
  std::printf(
      "median: decode %.3f ms, open + create %.2f ms, first batch %.2f ms, state to "
      "first batch %.2f ms; fresh open to first batch %.2f ms\n",
      Median(decode_ms), Median(create_ms), Median(first_ms), Median(total_ms), Median(fresh_ms));
  return 0;
}
