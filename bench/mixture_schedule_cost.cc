// The CPU cost of mapping a batch's global positions to sample indices (reader/mixture.h): a
// mixture's MixtureSchedule::Apply (window permutation, Bresenham chain, per-pass permutation)
// against one dataset's IndexPermutation::Apply (the exact order of reader/sampler.h), as the
// Sampler calls them for each batch, and a mixture of one dataset of the same size (the window
// and pass permutations without the chain). Prints ns of this thread's CPU time per position,
// the median of ROUNDS epochs, for each (BENCHMARKS.md, "Mixtures of datasets").
//
//   build/bench/mixture_schedule_cost [SAMPLES_A SAMPLES_B [BATCH [WORLD [ROUNDS]]]]
//
// Defaults: sources of 70,000 and 30,000 samples, weights 0.7 and 0.3, an epoch of their total
// (the single dataset: 100,000 samples), batch 256, world size 1 (rank 0's positions), 9 rounds.
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "reader/mixture.h"
#include "reader/sampler.h"

namespace {

double ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

// Runs `fill(epoch, positions, count)` over rank 0's positions of an epoch of n, batch by
// batch; returns the median over `rounds` epochs of CPU ns per position, and folds the indices
// into the hash *sink (equal hashes: equal indices, e.g. before and after a change).
template <typename Fill>
double Time(uint64_t n, uint64_t batch, uint64_t world, int rounds, Fill fill, uint64_t* sink) {
  std::vector<double> per_position;
  std::vector<uint64_t> positions(batch);
  for (int r = 0; r < rounds; ++r) {
    uint64_t count = 0;
    const double start = ThreadCpuNs();
    for (uint64_t p = 0; p < n; p += batch * world) {
      size_t k = 0;
      for (uint64_t q = p; k < batch && q < n; q += world) positions[k++] = q;
      fill(static_cast<uint64_t>(r), positions.data(), k);
      for (size_t i = 0; i < k; ++i) *sink = kiln::SplitMix64Mix(*sink ^ positions[i]);
      count += k;
    }
    per_position.push_back((ThreadCpuNs() - start) / static_cast<double>(count));
  }
  std::sort(per_position.begin(), per_position.end());
  return per_position[per_position.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t a = argc > 2 ? std::strtoull(argv[1], nullptr, 10) : 70000;
  const uint64_t b = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 30000;
  const uint64_t batch = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 256;
  const uint64_t world = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 1;
  const int rounds = argc > 5 ? std::atoi(argv[5]) : 9;
  if (a == 0 || b == 0 || batch == 0 || world == 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: %s [SAMPLES_A SAMPLES_B [BATCH [WORLD [ROUNDS]]]]\n", argv[0]);
    return 2;
  }
  std::vector<kiln::MixtureSourceSpec> specs(2);
  specs[0].num_samples = a;
  specs[0].weight = 0.7;
  specs[1].num_samples = b;
  specs[1].weight = 0.3;
  kiln::Result<kiln::MixtureSchedule> m = kiln::MixtureSchedule::Create(specs, 0);
  if (!m.ok()) return std::fprintf(stderr, "%s\n", m.status().ToString().c_str()), 1;
  const uint64_t n = m->samples_per_epoch();
  uint64_t single_hash = 0, mixture_hash = 0, none_hash = 0;
  const double single = Time(
      n, batch, world, rounds,
      [&](uint64_t epoch, uint64_t* p, size_t k) {
        kiln::IndexPermutation(n, kiln::SplitMix64Mix(5 ^ kiln::SplitMix64Mix(epoch))).Apply(p, k);
      },
      &single_hash);
  const double mixture = Time(
      n, batch, world, rounds,
      [&](uint64_t epoch, uint64_t* p, size_t k) { m->Apply(5, epoch, true, p, k); },
      &mixture_hash);
  // A mixture of one dataset of the same n: the window and pass permutations without a chain.
  std::vector<kiln::MixtureSourceSpec> one(1);
  one[0].num_samples = n;
  one[0].repeat = 1;
  kiln::Result<kiln::MixtureSchedule> m1 = kiln::MixtureSchedule::Create(one, 0);
  if (!m1.ok()) return std::fprintf(stderr, "%s\n", m1.status().ToString().c_str()), 1;
  uint64_t one_hash = 0;
  const double single_source = Time(
      n, batch, world, rounds,
      [&](uint64_t epoch, uint64_t* p, size_t k) { m1->Apply(5, epoch, true, p, k); }, &one_hash);
  const double none = Time(
      n, batch, world, rounds,
      [&](uint64_t epoch, uint64_t* p, size_t k) { m->Apply(5, epoch, false, p, k); }, &none_hash);
  std::printf(
      "positions %llu (sources %llu + %llu, weights 0.7/0.3), batch %llu, world %llu, "
      "%d rounds\n",
      static_cast<unsigned long long>(n), static_cast<unsigned long long>(a),
      static_cast<unsigned long long>(b), static_cast<unsigned long long>(batch),
      static_cast<unsigned long long>(world), rounds);
  std::printf("one dataset, exact order (IndexPermutation::Apply): %.1f ns/position\n", single);
  std::printf("mixture, exact order (MixtureSchedule::Apply):      %.1f ns/position\n", mixture);
  std::printf("mixture, none order (MixtureSchedule::Apply):       %.1f ns/position\n", none);
  std::printf("mixture of one dataset, exact order:                %.1f ns/position\n",
              single_source);
  std::printf(
      "index hashes: %016llx %016llx %016llx\n", static_cast<unsigned long long>(single_hash),
      static_cast<unsigned long long>(mixture_hash), static_cast<unsigned long long>(none_hash));
  return 0;
}
