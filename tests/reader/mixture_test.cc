// Mixtures of datasets (reader/mixture.h, reader/mixture_dataset.h, Loader::CreateMixture): the
// schedule's quotas and bijection, proportions within every window, on every rank and over the
// epoch, exactly-once within each pass of each source, the optimised schedule bit-identical to
// the reference formulas, the loader's batches (each dataset's own bytes and labels, sources
// named), byte-identical across threads, prefetch, io paths, world sizes and storage backends
// (LMDB, HDF5, mixed), resume at random points (also twice, also elastic) byte-identical to an
// uninterrupted run, and the refusals by name.
#include "reader/mixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "formats/format_registry.h"
#include "reader/direct_reader.h"
#include "reader/loader.h"
#include "reader/mixture_dataset.h"
#include "reader/reader_state.h"
#include "tests/reader/test_dataset.h"

namespace kiln {
namespace {

using testing::MakeSchema;
using testing::TestDataset;
using testing::TestDatasetOptions;

MixtureSchedule MustSchedule(const std::vector<MixtureSourceSpec>& specs, uint64_t n) {
  Result<MixtureSchedule> m = MixtureSchedule::Create(specs, n);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : MixtureSchedule();
}

std::vector<MixtureSourceSpec> Weighted(const std::vector<uint64_t>& sizes,
                                        const std::vector<double>& weights) {
  std::vector<MixtureSourceSpec> specs(sizes.size());
  for (size_t s = 0; s < sizes.size(); ++s) {
    specs[s].num_samples = sizes[s];
    specs[s].weight = weights[s];
    specs[s].name = "source" + std::to_string(s);
  }
  return specs;
}

// ---------------------------------------------------------------------------------------------
// The schedule.

TEST(MixtureScheduleTest, QuotasFollowWeightsRepeatsAndTheBudget) {
  MixtureSchedule w = MustSchedule(Weighted({5000, 200}, {0.7, 0.3}), 1000);
  EXPECT_EQ(w.samples_per_epoch(), 1000u);
  EXPECT_EQ(w.quota(0), 700u);
  EXPECT_EQ(w.quota(1), 300u);
  // Default budget with weights: the total of the sizes, split by weight.
  MixtureSchedule d = MustSchedule(Weighted({300, 100}, {1, 1}), 0);
  EXPECT_EQ(d.samples_per_epoch(), 400u);
  EXPECT_EQ(d.quota(0), 200u);
  EXPECT_EQ(d.quota(1), 200u);
  // Repeats: 1x the large set, 3x the fine-tuning set; default budget their sum.
  std::vector<MixtureSourceSpec> r(2);
  r[0].num_samples = 1000;
  r[0].repeat = 1;
  r[1].num_samples = 50;
  r[1].repeat = 3;
  MixtureSchedule rs = MustSchedule(r, 0);
  EXPECT_EQ(rs.samples_per_epoch(), 1150u);
  EXPECT_EQ(rs.quota(0), 1000u);
  EXPECT_EQ(rs.quota(1), 150u);
  // Largest remainder: 3 equal weights over 100 give 34, 33, 33 (ties to the lower source).
  MixtureSchedule t = MustSchedule(Weighted({10, 10, 10}, {1, 1, 1}), 100);
  EXPECT_EQ(t.quota(0), 34u);
  EXPECT_EQ(t.quota(1), 33u);
  EXPECT_EQ(t.quota(2), 33u);
}

TEST(MixtureScheduleTest, RefusesBadSpecsByName) {
  std::vector<MixtureSourceSpec> specs = Weighted({10, 10}, {1, -2});
  Result<MixtureSchedule> m = MixtureSchedule::Create(specs, 0);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("source 1 (source1)"), std::string::npos)
      << m.status().ToString();
  specs[1].weight = 0;
  specs[1].repeat = 2;
  m = MixtureSchedule::Create(specs, 0);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("every source a weight"), std::string::npos)
      << m.status().ToString();
  EXPECT_FALSE(MixtureSchedule::Create({}, 0).ok());
  specs = Weighted({10, 0}, {1, 1});
  m = MixtureSchedule::Create(specs, 0);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("has no samples"), std::string::npos);
}

// Schedule(i) is a bijection of [0, N) onto {(s, k) : k < c_s}, also for quotas of 0.
TEST(MixtureScheduleTest, ScheduleIsABijectionOntoTheDraws) {
  const std::vector<std::pair<std::vector<double>, uint64_t>> cases = {
      {{0.5, 0.3, 0.2}, 1000}, {{1, 1, 1, 1, 1}, 7}, {{0.9, 0.05, 0.05}, 333}, {{1}, 50}};
  for (const auto& [weights, n] : cases) {
    MixtureSchedule m =
        MustSchedule(Weighted(std::vector<uint64_t>(weights.size(), 10), weights), n);
    std::vector<std::vector<int>> seen(weights.size());
    for (size_t s = 0; s < weights.size(); ++s) seen[s].assign(m.quota(s), 0);
    for (uint64_t i = 0; i < n; ++i) {
      uint32_t s = 0;
      uint64_t k = 0;
      m.Schedule(i, &s, &k);
      ASSERT_LT(s, weights.size());
      ASSERT_LT(k, m.quota(s)) << "i " << i;
      ++seen[s][k];
    }
    for (size_t s = 0; s < weights.size(); ++s) {
      for (uint64_t k = 0; k < m.quota(s); ++k) ASSERT_EQ(seen[s][k], 1) << s << " " << k;
    }
  }
}

// Chi-square of `counts` against the quotas' proportions.
double ChiSquare(const std::vector<uint64_t>& counts, const MixtureSchedule& m) {
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  double chi = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    const double expected = static_cast<double>(total) * static_cast<double>(m.quota(s)) /
                            static_cast<double>(m.samples_per_epoch());
    const double d = static_cast<double>(counts[s]) - expected;
    chi += d * d / expected;
  }
  return chi;
}

// The proportions hold within every window of a few hundred positions and over the epoch: the
// aligned windows of kMixtureWindow within one sample per source, every sliding window of 300
// with a chi-square far below the 0.1% critical value (13.8 for 2 degrees of freedom: a
// random i.i.d. draw would exceed it in 1 window of 1000), and the epoch exactly. Runs of one
// source stay short.
TEST(MixtureScheduleTest, ProportionsHoldInEveryWindowAndOverTheEpoch) {
  MixtureSchedule m = MustSchedule(Weighted({100000, 5000, 300}, {0.6, 0.3, 0.1}), 60000);
  for (bool shuffle : {true, false}) {
    for (uint64_t epoch : {0, 1, 7}) {
      std::vector<uint32_t> src(m.samples_per_epoch());
      for (uint64_t p = 0; p < src.size(); ++p) {
        src[p] = m.Draw(3, epoch, shuffle, p).source;
      }
      std::vector<uint64_t> epoch_counts(3, 0);
      for (uint32_t s : src) ++epoch_counts[s];
      for (size_t s = 0; s < 3; ++s) EXPECT_EQ(epoch_counts[s], m.quota(s));
      for (uint64_t w = 0; w + kMixtureWindow <= src.size(); w += kMixtureWindow) {
        std::vector<uint64_t> c(3, 0);
        for (uint64_t p = w; p < w + kMixtureWindow; ++p) ++c[src[p]];
        for (size_t s = 0; s < 3; ++s) {
          const double want = static_cast<double>(kMixtureWindow) * m.quota(s) / 60000.0;
          ASSERT_LE(std::abs(static_cast<double>(c[s]) - want), 3.0) << "window " << w;
        }
      }
      double worst = 0;
      for (uint64_t w = 0; w + 300 <= src.size(); w += 37) {
        std::vector<uint64_t> c(3, 0);
        for (uint64_t p = w; p < w + 300; ++p) ++c[src[p]];
        worst = std::max(worst, ChiSquare(c, m));
      }
      EXPECT_LT(worst, 13.8) << "shuffle " << shuffle << " epoch " << epoch;
      uint64_t run = 1, longest = 1;
      for (uint64_t p = 1; p < src.size(); ++p) {
        run = src[p] == src[p - 1] ? run + 1 : 1;
        longest = std::max(longest, run);
      }
      // Without the window shuffle the schedule is a Bresenham chain: 0.6 comes in runs of 1-2.
      EXPECT_LE(longest, shuffle ? 40u : 2u) << "shuffle " << shuffle;
    }
  }
}

// Every rank's share of the epoch (positions r, r + W, r + 2W, ... of reader/sampler.h) keeps
// the mixture's proportions for any world size: over each run of 300 of the rank's draws and
// over its whole share. The bound per run is the chi-square critical value for 2 degrees of
// freedom at 0.1% divided over the runs (Bonferroni: 2 ln(runs / 0.001), 23 for 100 runs), and
// the runs' mean must stay within 3 standard errors of its i.i.d. expectation of 2. Without the
// window shuffle a pure Bresenham pattern is periodic: with weights 1:1 on 2 ranks each rank
// reads one source only, which the same statistic must flag (so it can see a skew).
TEST(MixtureScheduleTest, EveryRanksProportionsHoldForAnyWorldSize) {
  const auto rank_sources = [](const MixtureSchedule& m, bool shuffle, uint64_t epoch,
                               uint32_t world, uint32_t rank) {
    std::vector<uint32_t> src;
    for (uint64_t p = rank; p < m.samples_per_epoch(); p += world) {
      src.push_back(m.Draw(5, epoch, shuffle, p).source);
    }
    return src;
  };
  const auto counts_of = [](const std::vector<uint32_t>& src, size_t begin, size_t end,
                            size_t sources) {
    std::vector<uint64_t> c(sources, 0);
    for (size_t k = begin; k < end; ++k) ++c[src[k]];
    return c;
  };
  MixtureSchedule m = MustSchedule(Weighted({100000, 5000, 300}, {0.6, 0.3, 0.1}), 60000);
  for (uint32_t world : {2u, 3u, 8u, 64u}) {
    for (uint32_t rank : {0u, world / 2, world - 1}) {
      for (uint64_t epoch : {0, 3}) {
        const std::vector<uint32_t> src = rank_sources(m, true, epoch, world, rank);
        const size_t runs = src.size() / 300;
        ASSERT_GE(runs, 3u);
        const double bound = 2 * std::log(static_cast<double>(runs) / 0.001);
        double sum = 0, worst = 0;
        for (size_t w = 0; w < runs; ++w) {
          const double chi = ChiSquare(counts_of(src, 300 * w, 300 * w + 300, 3), m);
          sum += chi;
          worst = std::max(worst, chi);
        }
        const std::string what = "world " + std::to_string(world) + " rank " +
                                 std::to_string(rank) + " epoch " + std::to_string(epoch);
        EXPECT_LT(worst, bound) << what;
        // A chi-square with 2 degrees of freedom has variance 4: the mean of `runs` of them has
        // standard error 2 / sqrt(runs).
        EXPECT_LT(sum / static_cast<double>(runs), 2 + 3 * 2 / std::sqrt(runs)) << what;
        EXPECT_LT(ChiSquare(counts_of(src, 0, src.size(), 3), m), 13.8) << what;
      }
    }
  }
  // The statistic sees a skew: dataset order (no window shuffle), weights 1:1, 2 ranks.
  MixtureSchedule even = MustSchedule(Weighted({1000, 1000}, {1, 1}), 2000);
  const std::vector<uint32_t> skewed = rank_sources(even, false, 0, 2, 0);
  EXPECT_GT(ChiSquare(counts_of(skewed, 0, 300, 2), even), 100.0);
  const std::vector<uint32_t> mixed = rank_sources(even, true, 0, 2, 0);
  EXPECT_LT(ChiSquare(counts_of(mixed, 0, mixed.size(), 2), even), 13.8);
}

// Each pass over a source draws every one of its samples exactly once; a larger source is
// subsampled without repetition and the next epoch continues with samples not yet seen.
TEST(MixtureScheduleTest, ExactlyOncePerPassAndLaterEpochsContinue) {
  // Source 0: 100 samples, 250 draws per epoch (2.5 passes); source 1: 1000 samples, 250 draws.
  MixtureSchedule m = MustSchedule(Weighted({100, 1000}, {1, 1}), 500);
  ASSERT_EQ(m.quota(0), 250u);
  for (bool shuffle : {true, false}) {
    std::vector<std::vector<int>> seen(2);
    seen[0].assign(100, 0);
    seen[1].assign(1000, 0);
    for (uint64_t epoch = 0; epoch < 4; ++epoch) {
      for (uint64_t p = 0; p < m.samples_per_epoch(); ++p) {
        const MixtureDraw d = m.Draw(11, epoch, shuffle, p);
        ++seen[d.source][d.sample];
      }
      if (epoch == 0) {
        // Passes 0 and 1 whole, half of pass 2: each sample 2 or 3 times, 50 of them 3 times.
        int thrice = 0;
        for (int c : seen[0]) {
          ASSERT_TRUE(c == 2 || c == 3) << c;
          thrice += c == 3;
        }
        EXPECT_EQ(thrice, 50);
      }
      if (epoch == 1) {
        // Epoch 1 finishes pass 2 with the other 50: 5 passes, each sample 5 times.
        for (int c : seen[0]) ASSERT_EQ(c, 5);
      }
      if (epoch == 3) {
        // 1000 draws of the large source over 4 epochs: one pass, every sample once.
        for (int c : seen[1]) ASSERT_EQ(c, 1);
      } else {
        for (int c : seen[1]) ASSERT_LE(c, 1);
      }
    }
  }
}

TEST(MixtureScheduleTest, ApplyEqualsIndexAndDependsOnlyOnSeedEpochPosition) {
  MixtureSchedule m = MustSchedule(Weighted({77, 1000, 5}, {0.5, 0.4, 0.1}), 3000);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> positions(500);
  for (uint64_t& p : positions) p = rng() % 3000;
  std::vector<uint64_t> applied = positions;
  m.Apply(9, 2, true, applied.data(), applied.size());
  for (size_t k = 0; k < positions.size(); ++k) {
    ASSERT_EQ(applied[k], m.Index(9, 2, true, positions[k])) << k;
    const uint32_t s = m.SourceOfIndex(applied[k]);
    ASSERT_LT(applied[k] - m.offset(s), m.source_samples(s));
  }
  // Another seed or epoch gives another order.
  EXPECT_NE(m.Index(9, 2, true, 5) + m.Index(9, 2, true, 6) * 7,
            m.Index(10, 2, true, 5) + m.Index(10, 2, true, 6) * 7);
}

// The formulas of reader/mixture.md, "Schedule", written out on their own (128-bit products,
// hardware division, one position at a time): the reference the optimised Schedule, Draw,
// Index and Apply must equal bit for bit. Only the quotas come from the schedule under test.
struct ReferenceMixture {
  std::vector<uint64_t> sizes, quotas;
  uint64_t total = 0;

  explicit ReferenceMixture(const MixtureSchedule& m) : total(m.samples_per_epoch()) {
    for (size_t s = 0; s < m.num_sources(); ++s) {
      sizes.push_back(m.source_samples(s));
      quotas.push_back(m.quota(s));
    }
  }
  static uint64_t Floor(uint64_t a, uint64_t b, uint64_t d) {
    return static_cast<uint64_t>(static_cast<__uint128_t>(a) * b / d);
  }
  void Chain(uint64_t i, uint32_t* source, uint64_t* draw) const {
    uint64_t x = i;
    for (uint32_t s = 0; s + 1 < sizes.size(); ++s) {
      uint64_t rest = 0;
      for (size_t t = s; t < quotas.size(); ++t) rest += quotas[t];
      if (quotas[s] == 0) continue;
      const uint64_t k = Floor(x, quotas[s], rest);
      if (Floor(x + 1, quotas[s], rest) > k) {
        *source = s;
        *draw = k;
        return;
      }
      x -= k;
    }
    *source = static_cast<uint32_t>(sizes.size() - 1);
    *draw = x;
  }
  uint64_t Index(uint64_t seed, uint64_t epoch, bool shuffle, uint64_t p) const {
    constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
    uint64_t i = p;
    if (shuffle) {
      const uint64_t key = SplitMix64Mix(seed ^ SplitMix64Mix(epoch + kGolden));
      const uint64_t w = p / 256, len = std::min<uint64_t>(256, total - 256 * w);
      // "MixWindw" in ASCII.
      i = 256 * w + IndexPermutation(len, SplitMix64Mix(SplitMix64Mix(key ^ 0x4D697857696E6477ull) +
                                                        w))(p % 256);
    }
    uint32_t s = 0;
    uint64_t k = 0;
    Chain(i, &s, &k);
    const __uint128_t d = static_cast<__uint128_t>(epoch) * quotas[s] + k;
    const uint64_t pass = static_cast<uint64_t>(d / sizes[s]);
    const uint64_t j = static_cast<uint64_t>(d % sizes[s]);
    uint64_t sample = j;
    if (shuffle) {
      // "MixPass!" in ASCII.
      const uint64_t key =
          SplitMix64Mix(SplitMix64Mix(SplitMix64Mix(seed ^ 0x4D69785061737321ull) + s) + pass);
      sample = IndexPermutation(sizes[s], key)(j);
    }
    uint64_t offset = 0;
    for (uint32_t t = 0; t < s; ++t) offset += sizes[t];
    return offset + sample;
  }
};

TEST(MixtureScheduleTest, DividerIsExactAtTheEdges) {
  std::mt19937_64 rng(3);
  std::vector<uint64_t> divisors = {1,
                                    2,
                                    3,
                                    7,
                                    255,
                                    256,
                                    1ull << 32,
                                    (1ull << 32) - 1,
                                    (1ull << 32) + 1,
                                    1ull << 63,
                                    (1ull << 63) + 1,
                                    ~uint64_t{0},
                                    ~uint64_t{0} - 1};
  for (int c = 0; c < 200; ++c) divisors.push_back(rng() >> (rng() % 64) | 1);
  for (const uint64_t d : divisors) {
    const MixtureSchedule::Divider div(d);
    std::vector<uint64_t> nums = {
        0, 1, d - 1, d, d + 1, 2 * d, 2 * d - 1, ~uint64_t{0}, ~uint64_t{0} - 1, ~uint64_t{0} - d};
    for (int c = 0; c < 200; ++c) nums.push_back(rng() >> (rng() % 64));
    for (const uint64_t num : nums) {
      uint64_t q = 0, r = 0;
      div.DivMod(num, &q, &r);
      ASSERT_EQ(q, num / d) << num << " / " << d;
      ASSERT_EQ(r, num % d) << num << " % " << d;
    }
  }
}

// The optimised schedule (one reciprocal multiply per level, batched Feistel evaluations,
// draws grouped by source and pass) equals the reference formulas over many random mixtures,
// seeds, epochs (also past 2^32 and 2^60, where e c_s needs 128 bits) and position patterns (a
// rank's batch: consecutive or strided; padding wrapping round; random), in both orders.
TEST(MixtureScheduleTest, OptimisedScheduleIsBitIdenticalToTheReferenceFormula) {
  std::mt19937_64 rng(20261204);
  uint64_t checked = 0;
  for (int c = 0; c < 300; ++c) {
    const size_t sources = 1 + rng() % (c % 10 == 0 ? 40 : 5);
    std::vector<uint64_t> sizes(sources);
    std::vector<double> weights(sources);
    const bool huge = c % 7 == 3;  // sizes and epochs where products exceed 64 bits
    for (size_t s = 0; s < sources; ++s) {
      sizes[s] = huge ? (uint64_t{1} << (30 + rng() % 30)) + rng() % 1000 : 1 + rng() % 3000;
      weights[s] = 0.01 + static_cast<double>(rng() % 1000) / 10.0;
    }
    uint64_t n = 0;
    switch (c % 4) {
      case 0:
        n = 0;
        break;  // the default: the sizes' total
      case 1:
        n = 1 + rng() % 100;
        break;
      case 2:
        n = 1 + rng() % 20000;
        break;
      case 3:
        n = huge ? (uint64_t{1} << (33 + rng() % 25)) + rng() : 1 + rng() % 2000;
        break;
    }
    const MixtureSchedule m = MustSchedule(Weighted(sizes, weights), n);
    ASSERT_GT(m.samples_per_epoch(), 0u);
    const ReferenceMixture ref(m);
    const uint64_t total = m.samples_per_epoch();
    for (int t = 0; t < 6; ++t) {
      const uint64_t seed = rng() >> (rng() % 64);
      const uint64_t epochs[] = {
          0, 1, rng() % 100, rng() % (uint64_t{1} << 33), rng() >> (rng() % 8), ~uint64_t{0}};
      const uint64_t epoch = epochs[t];
      const bool shuffle = t % 3 != 2;
      // A batch of up to 600 positions: consecutive, every W-th, wrapping past N, or random.
      std::vector<uint64_t> positions;
      const uint64_t count = 1 + rng() % 600, start = rng() % total, stride = 1 + rng() % 9;
      for (uint64_t k = 0; k < count; ++k) {
        switch (t % 4) {
          case 0:
            positions.push_back((start + k) % total);
            break;
          case 1:
            positions.push_back((start + k * stride) % total);
            break;
          case 2:
            positions.push_back(k % total);
            break;
          default:
            positions.push_back(rng() % total);
            break;
        }
      }
      std::vector<uint64_t> applied = positions;
      m.Apply(seed, epoch, shuffle, applied.data(), applied.size());
      for (size_t k = 0; k < positions.size(); ++k) {
        const uint64_t want = ref.Index(seed, epoch, shuffle, positions[k]);
        ASSERT_EQ(applied[k], want) << "case " << c << " position " << positions[k] << " epoch "
                                    << epoch << " seed " << seed << " shuffle " << shuffle;
        if (k < 20) {
          ASSERT_EQ(m.Index(seed, epoch, shuffle, positions[k]), want) << "case " << c;
          uint32_t owner = 0;
          for (uint64_t end = ref.sizes[0]; want >= end;) end += ref.sizes[++owner];
          ASSERT_EQ(m.SourceOfIndex(want), owner) << "case " << c << " index " << want;
          uint32_t s0 = 0, s1 = 0;
          uint64_t k0 = 0, k1 = 0;
          m.Schedule(positions[k], &s0, &k0);
          ref.Chain(positions[k], &s1, &k1);
          ASSERT_EQ(s0, s1) << "case " << c << " index " << positions[k];
          ASSERT_EQ(k0, k1) << "case " << c << " index " << positions[k];
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100000u);
}

// ---------------------------------------------------------------------------------------------
// The loader over a mixture.

// A sample as a batch shows it.
struct Drawn {
  uint32_t source = 0;
  uint64_t index = 0;
  int64_t label = 0;
  uint8_t padding = 0;
  std::vector<uint8_t> data;
  bool operator==(const Drawn& o) const {
    return source == o.source && index == o.index && label == o.label && padding == o.padding &&
           data == o.data;
  }
};

// One event of the stream: a batch or the end of an epoch.
struct Event {
  bool end = false;
  uint64_t epoch = 0;
  uint64_t index = 0;
  std::vector<Drawn> samples;
  bool operator==(const Event& o) const {
    return end == o.end && epoch == o.epoch && index == o.index && samples == o.samples;
  }
};

std::vector<Event> ReadEvents(Loader& loader, uint64_t count) {
  std::vector<Event> out;
  for (uint64_t i = 0; i < count; ++i) {
    Batch b;
    Result<bool> r = loader.Next(&b);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return out;
    Event e;
    e.end = !*r;
    if (*r) {
      e.epoch = b.epoch;
      e.index = b.index;
      EXPECT_NE(b.sources, nullptr);
      const uint64_t sb = b.schema.sample_bytes();
      for (uint32_t k = 0; k < b.size; ++k) {
        Drawn d;
        d.source = b.sources[k];
        d.index = b.sample_indices[k];
        d.label = b.labels[k];
        d.padding = b.is_padding[k];
        d.data.assign(b.data + k * sb, b.data + (k + 1) * sb);
        e.samples.push_back(std::move(d));
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

ReaderState SaveAndLoad(const Loader& loader) {
  const std::string blob = loader.state().Encode();
  EXPECT_EQ(blob.size(), ReaderStateBytes(loader.mixture()->num_sources()));
  Result<ReaderState> back = ReaderState::Decode(blob);
  EXPECT_TRUE(back.ok()) << back.status().ToString();
  return back.ok() ? *back : ReaderState{};
}

class MixtureLoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const uint64_t sizes[] = {120, 50, 9};
    for (uint64_t n : sizes) {
      TestDatasetOptions o;
      o.num_samples = n;
      o.schema = MakeSchema(6, 5, 3);
      o.samples_per_shard = 16;
      auto ds = std::make_unique<TestDataset>(o);
      ASSERT_TRUE(ds->ok());
      datasets_->push_back(std::move(ds));
    }
  }
  static void TearDownTestSuite() { datasets_->clear(); }

  static std::vector<std::shared_ptr<const Dataset>> Sources(size_t count = 3) {
    std::vector<std::shared_ptr<const Dataset>> out;
    for (size_t s = 0; s < count; ++s) out.push_back((*datasets_)[s]->Open());
    return out;
  }
  static MixtureOptions Mix() {
    MixtureOptions m;
    m.weights = {0.5, 0.3, 0.2};
    m.samples_per_epoch = 203;
    return m;
  }
  static LoaderOptions Options() {
    LoaderOptions o;
    o.pin_memory = false;
    o.batch_size = 8;
    o.seed = 4;
    o.num_threads = 2;
    return o;
  }
  static std::unique_ptr<Loader> Make(const LoaderOptions& o, const MixtureOptions& m = Mix()) {
    Result<std::unique_ptr<Loader>> l =
        Loader::CreateMixture(Sources(m.weights.size() + m.repeats.size()), m, o);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? std::move(l).value() : nullptr;
  }
  // Every sample of an uninterrupted single-rank epoch, by global position.
  static std::vector<Drawn> Sequence(uint64_t epoch) {
    LoaderOptions o = Options();
    o.start_epoch = epoch;
    std::unique_ptr<Loader> l = Make(o);
    std::vector<Drawn> seq;
    if (l == nullptr) return seq;
    for (const Event& e : ReadEvents(*l, l->batches_per_epoch())) {
      for (const Drawn& d : e.samples) seq.push_back(d);
    }
    return seq;
  }
  static std::vector<std::unique_ptr<TestDataset>>* datasets_;
};
std::vector<std::unique_ptr<TestDataset>>* MixtureLoaderTest::datasets_ =
    new std::vector<std::unique_ptr<TestDataset>>();

// Each sample is its own dataset's, bytes and label; the epoch draws each source's quota and
// each pass of a source reads every sample once.
TEST_F(MixtureLoaderTest, BatchesHoldEachDatasetsOwnSamplesInTheirProportions) {
  std::unique_ptr<Loader> l = Make(Options());
  ASSERT_NE(l, nullptr);
  const MixtureSchedule& m = *l->mixture();
  EXPECT_EQ(l->samples_per_epoch(), 203u);
  std::vector<uint64_t> counts(3, 0);
  std::vector<std::map<uint64_t, int>> seen(3);
  const TensorSchema schema = MakeSchema(6, 5, 3);
  for (const Event& e : ReadEvents(*l, l->batches_per_epoch())) {
    for (const Drawn& d : e.samples) {
      ASSERT_LT(d.source, 3u);
      ASSERT_LT(d.index, (*datasets_)[d.source]->num_samples());
      EXPECT_EQ(d.label, testing::SampleLabel(d.index));
      EXPECT_EQ(d.data, testing::SampleBytes(schema, d.index));
      ++counts[d.source];
      ++seen[d.source][d.index];
    }
  }
  for (size_t s = 0; s < 3; ++s) EXPECT_EQ(counts[s], m.quota(s)) << s;
  // Largest remainder of 203 x (0.5, 0.3, 0.2): 101, 61, 41. Source 0: 101 of 120 samples,
  // none twice. Source 1: 61 draws of 50, one pass + 11. Source 2: 41 draws of 9: 4 passes + 5.
  ASSERT_EQ(m.quota(0), 101u);
  ASSERT_EQ(m.quota(1), 61u);
  ASSERT_EQ(m.quota(2), 41u);
  for (const auto& [index, c] : seen[0]) EXPECT_EQ(c, 1) << index;
  EXPECT_EQ(seen[1].size(), 50u);
  for (const auto& [index, c] : seen[1]) EXPECT_TRUE(c == 1 || c == 2) << index;
  for (const auto& [index, c] : seen[2]) EXPECT_TRUE(c == 4 || c == 5) << index;
}

// Byte-identical whatever threads, prefetch and io path; the union over ranks of any world size
// is the single rank's epoch, each rank with the same number of batches.
TEST_F(MixtureLoaderTest, ByteIdenticalAcrossThreadsPrefetchIoAndWorldSizes) {
  const std::vector<Drawn> seq = Sequence(1);
  ASSERT_EQ(seq.size(), 203u);
  struct Config {
    uint32_t threads, prefetch;
    IoMode io;
  };
  for (const Config& c :
       {Config{1, 1, IoMode::kMmap}, Config{4, 5, IoMode::kMmap}, Config{3, 2, IoMode::kDirect}}) {
    LoaderOptions o = Options();
    o.start_epoch = 1;
    o.num_threads = c.threads;
    o.prefetch = c.prefetch;
    o.io = c.io;
    std::unique_ptr<Loader> l = Make(o);
    ASSERT_NE(l, nullptr);
    std::vector<Drawn> got;
    for (const Event& e : ReadEvents(*l, l->batches_per_epoch())) {
      for (const Drawn& d : e.samples) got.push_back(d);
    }
    EXPECT_TRUE(got == seq) << "threads " << c.threads << " io " << IoModeName(c.io) << " ("
                            << l->io_reason() << ")";
  }
  for (uint32_t w : {2u, 3u, 5u}) {
    uint64_t batches = 0;
    for (uint32_t r = 0; r < w; ++r) {
      LoaderOptions o = Options();
      o.start_epoch = 1;
      o.world_size = w;
      o.rank = r;
      std::unique_ptr<Loader> l = Make(o);
      ASSERT_NE(l, nullptr);
      if (r == 0) batches = l->batches_per_epoch();
      EXPECT_EQ(l->batches_per_epoch(), batches) << "rank " << r << " of " << w;
      uint64_t j = 0;
      for (const Event& e : ReadEvents(*l, batches)) {
        for (const Drawn& d : e.samples) {
          ASSERT_LT(r + j * w, seq.size());
          ASSERT_TRUE(d == seq[r + j * w]) << "rank " << r << " of " << w << " sample " << j;
          ++j;
        }
      }
      EXPECT_EQ(j, (203 - r + w - 1) / w);  // tail short: the rank's own share, together all 203
    }
  }
}

// A mixture over LMDB sources, over HDF5 sources and over one source of each backend, read
// through the mappings, with direct reads asked and with the automatic choice, gives the batches
// of the same mixture over shard sources, byte for byte (data, labels, sources, indices,
// padding) over two epochs; so does the shard mixture read directly. Direct reads need every
// source to have them: otherwise the loader names the first source that lacks them and its
// backend, and reads through the mappings.
TEST_F(MixtureLoaderTest, EveryBackendAndIoPathGivesTheShardMixturesBatches) {
  std::unique_ptr<Loader> base = Make(Options());
  ASSERT_NE(base, nullptr);
  const uint64_t events = 2 * (base->batches_per_epoch() + 1);
  const std::vector<Event> want = ReadEvents(*base, events);
  ASSERT_EQ(want.size(), events);
  {
    LoaderOptions o = Options();
    o.io = IoMode::kDirect;
    o.num_threads = 3;
    std::unique_ptr<Loader> direct = Make(o);
    ASSERT_NE(direct, nullptr);
    if (DirectIoAvailable()) {
      EXPECT_EQ(direct->io_path(), IoMode::kDirect) << direct->io_reason();
    }
    EXPECT_TRUE(ReadEvents(*direct, events) == want) << "shards, " << direct->io_reason();
  }
  const std::vector<std::vector<std::string>> mixes = {
      {"lmdb", "lmdb", "lmdb"}, {"hdf5", "hdf5", "hdf5"}, {"shards", "lmdb", "hdf5"}};
  int ran = 0;
  for (const std::vector<std::string>& formats : mixes) {
    bool compiled = true;
    for (const std::string& f : formats) {
      const StorageFormat* format = FindStorageFormat(f);
      compiled = compiled && format != nullptr && format->compiled_in;
    }
    if (!compiled) continue;
    ++ran;
    std::vector<std::unique_ptr<TestDataset>> owned;
    std::vector<std::shared_ptr<const Dataset>> sources;
    for (size_t s = 0; s < formats.size(); ++s) {
      TestDatasetOptions d;
      d.num_samples = (*datasets_)[s]->num_samples();
      d.schema = MakeSchema(6, 5, 3);
      d.samples_per_shard = 16;
      d.format = formats[s];
      owned.push_back(std::make_unique<TestDataset>(d));
      ASSERT_TRUE(owned.back()->ok()) << formats[s];
      sources.push_back(owned.back()->Open());
      ASSERT_NE(sources.back(), nullptr);
    }
    const size_t first_without = formats[0] == "shards" ? 1 : 0;
    for (IoMode io : {IoMode::kMmap, IoMode::kDirect, IoMode::kAuto}) {
      LoaderOptions o = Options();
      o.io = io;
      o.num_threads = io == IoMode::kDirect ? 3 : 2;
      o.prefetch = io == IoMode::kAuto ? 1 : 3;
      Result<std::unique_ptr<Loader>> l = Loader::CreateMixture(sources, Mix(), o);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      const std::string what = formats[0] + "+" + formats[1] + "+" + formats[2] + " io " +
                               IoModeName(io) + " (" + (*l)->io_reason() + ")";
      EXPECT_EQ((*l)->io_path(), IoMode::kMmap) << what;
      if (io == IoMode::kDirect) {
        EXPECT_NE((*l)->io_reason().find("mixture source " + std::to_string(first_without) + " (" +
                                         owned[first_without]->dir() + "): the " +
                                         formats[first_without] + " backend has no direct reads"),
                  std::string::npos)
            << what;
      }
      const std::vector<Event> got = ReadEvents(**l, events);
      ASSERT_EQ(got.size(), want.size()) << what;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_TRUE(got[i] == want[i]) << what << " event " << i;
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "neither LMDB nor HDF5 compiled in";
}

// Stopped at random points, saved through the binary form and restored (with other threads and
// prefetch, sometimes stopped and restored a second time): the stream over three epochs equals
// the uninterrupted one, byte for byte.
TEST_F(MixtureLoaderTest, ResumeAtRandomPointsEqualsTheUninterruptedStream) {
  std::unique_ptr<Loader> whole = Make(Options());
  ASSERT_NE(whole, nullptr);
  const uint64_t per_epoch = whole->batches_per_epoch() + 1;  // batches and the end
  const std::vector<Event> want = ReadEvents(*whole, 3 * per_epoch);
  std::mt19937_64 rng(29);
  for (int c = 0; c < 12; ++c) {
    const uint64_t stop1 = rng() % (3 * per_epoch - 2) + 1;
    const uint64_t stop2 = stop1 + rng() % (3 * per_epoch - stop1);
    const bool twice = c % 2 == 1;
    std::unique_ptr<Loader> first = Make(Options());
    std::vector<Event> got = ReadEvents(*first, stop1);
    LoaderOptions o = Options();
    o.num_threads = 1 + c % 4;
    o.prefetch = 1 + c % 3;
    o.resume = SaveAndLoad(*first);
    first.reset();
    std::unique_ptr<Loader> second = Make(o);
    ASSERT_NE(second, nullptr);
    if (twice) {
      for (Event& e : ReadEvents(*second, stop2 - stop1)) got.push_back(std::move(e));
      o.resume = SaveAndLoad(*second);
      o.num_threads = 3;
      second = Make(o);
      ASSERT_NE(second, nullptr);
    }
    for (Event& e : ReadEvents(*second, 3 * per_epoch - got.size())) got.push_back(std::move(e));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(got[i] == want[i])
          << "case " << c << " stop " << stop1 << "/" << stop2 << " event " << i;
    }
  }
}

// A state saved on 2 ranks restores on 3 (and 1) with another batch size: the remaining global
// positions are split by the sampler's rule, each rank reading exactly the uninterrupted run's
// samples at its positions.
TEST_F(MixtureLoaderTest, ElasticResumeOnAnotherWorldSize) {
  const std::vector<Drawn> seq = Sequence(0);
  LoaderOptions o = Options();
  o.world_size = 2;
  o.rank = 1;
  std::unique_ptr<Loader> saved = Make(o);
  ASSERT_NE(saved, nullptr);
  (void)ReadEvents(*saved, 5);
  const ReaderState state = SaveAndLoad(*saved);
  const uint64_t c = 5 * 8 * 2;
  ASSERT_EQ(state.samples_consumed, c);
  for (uint32_t w : {3u, 1u}) {
    std::set<uint64_t> positions;
    for (uint32_t r = 0; r < w; ++r) {
      LoaderOptions ro = Options();
      ro.world_size = w;
      ro.rank = r;
      ro.batch_size = 5;
      ro.resume = state;
      std::unique_ptr<Loader> l = Make(ro);
      ASSERT_NE(l, nullptr);
      uint64_t j = 0;
      for (const Event& e : ReadEvents(*l, l->batches_in_epoch())) {
        for (const Drawn& d : e.samples) {
          const uint64_t p = c + r + j * w;
          ASSERT_LT(p, seq.size());
          ASSERT_TRUE(d == seq[p]) << "world " << w << " rank " << r << " position " << p;
          positions.insert(p);
          ++j;
        }
      }
    }
    EXPECT_EQ(positions.size(), seq.size() - c) << "world " << w;
  }
}

// Datasets with other schemas are refused at open, naming both datasets and the field; states
// of another mixture are refused by name.
TEST_F(MixtureLoaderTest, RefusesMismatchesByName) {
  TestDatasetOptions other;
  other.num_samples = 10;
  other.schema = MakeSchema(6, 5, 1);
  TestDataset grey(other);
  ASSERT_TRUE(grey.ok());
  std::vector<std::shared_ptr<const Dataset>> sources = Sources(1);
  sources.push_back(grey.Open());
  MixtureOptions two;
  two.weights = {1, 1};
  Result<std::unique_ptr<Loader>> l = Loader::CreateMixture(sources, two, Options());
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
  const std::string msg = l.status().message();
  EXPECT_NE(msg.find((*datasets_)[0]->dir()), std::string::npos) << msg;
  EXPECT_NE(msg.find(grey.dir()), std::string::npos) << msg;
  EXPECT_NE(msg.find("shape [6, 5, 3] vs [6, 5, 1]"), std::string::npos) << msg;

  LoaderOptions block = Options();
  block.shuffle = ShuffleMode::kBlock;
  l = Loader::CreateMixture(Sources(), Mix(), block);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("block order"), std::string::npos);
  MixtureOptions short_weights = Mix();
  short_weights.weights.pop_back();
  l = Loader::CreateMixture(Sources(), short_weights, Options());
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("3 datasets but 2 weights"), std::string::npos);

  std::unique_ptr<Loader> base = Make(Options());
  ASSERT_NE(base, nullptr);
  (void)ReadEvents(*base, 3);
  const ReaderState state = SaveAndLoad(*base);
  const auto refused = [&](const ReaderState& st, const MixtureOptions& m,
                           const std::vector<std::shared_ptr<const Dataset>>& ds,
                           const std::string& words) {
    LoaderOptions o = Options();
    o.resume = st;
    Result<std::unique_ptr<Loader>> r = Loader::CreateMixture(ds, m, o);
    ASSERT_FALSE(r.ok()) << words;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().ToString();
  };
  MixtureOptions weights = Mix();
  weights.weights = {0.4, 0.4, 0.2};
  refused(state, weights, Sources(), "mixture source 0 (" + (*datasets_)[0]->dir() + ") draws 101");
  MixtureOptions budget = Mix();
  budget.samples_per_epoch = 300;
  refused(state, budget, Sources(), "draws 101 samples per epoch in the state but 150");
  std::vector<std::shared_ptr<const Dataset>> swapped = Sources();
  std::swap(swapped[0], swapped[1]);
  refused(state, Mix(), swapped,
          "mixture source 0 (" + (*datasets_)[1]->dir() + ") is another dataset");
  MixtureOptions fewer;
  fewer.weights = {0.5, 0.5};
  refused(state, fewer, Sources(2), "saved on a mixture of 3 datasets; this loader mixes 2");
  // A mixture's state into a loader over one dataset, and the other way round.
  LoaderOptions o = Options();
  o.resume = state;
  l = Loader::Create(Sources(1)[0], o);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(
      l.status().message().find("over a mixture of 3 datasets; this loader reads one dataset"),
      std::string::npos)
      << l.status().ToString();
  std::unique_ptr<Loader> single = std::move(Loader::Create(Sources(1)[0], Options())).value();
  refused(single->state(), Mix(), Sources(), "over one dataset; this loader reads a mixture of 3");
}

// A single dataset's state stays version 1, byte for byte (96 bytes), and still restores.
TEST_F(MixtureLoaderTest, SingleDatasetStatesStayVersionOne) {
  std::unique_ptr<Loader> single = std::move(Loader::Create(Sources(1)[0], Options())).value();
  Batch b;
  ASSERT_TRUE(single->Next(&b).ok());
  EXPECT_EQ(b.sources, nullptr);
  const std::string blob = single->state().Encode();
  ASSERT_EQ(blob.size(), kReaderStateBytes);
  EXPECT_EQ(blob[4], 1);
  LoaderOptions o = Options();
  o.resume = *ReaderState::Decode(blob);
  EXPECT_TRUE(Loader::Create(Sources(1)[0], o).ok());
}

}  // namespace
}  // namespace kiln
