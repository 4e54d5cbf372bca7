// Tests of kiln::Sampler against its header's contract: the permutation as specified (a
// reference implementation written from the header's description), its dependence on (seed,
// epoch) only, and the per-rank batch plan checked against a brute-force model for every
// TailPolicy, with and without drop_last, over many (N, W, B).
#include "reader/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

namespace kiln {
namespace {

// ---------------------------------------------------------------------------------------------
// Helpers.

SamplerOptions Options(uint64_t n, uint32_t batch, uint32_t world = 1, uint32_t rank = 0,
                       TailPolicy tail = TailPolicy::kShort, bool drop_last = false,
                       bool shuffle = true, uint64_t seed = 0) {
  SamplerOptions o;
  o.num_samples = n;
  o.batch_size = batch;
  o.world_size = world;
  o.rank = rank;
  o.tail = tail;
  o.drop_last = drop_last;
  o.shuffle = shuffle ? ShuffleMode::kExact : ShuffleMode::kNone;
  o.seed = seed;
  return o;
}

Sampler MustCreate(const SamplerOptions& o) {
  Result<Sampler> s = Sampler::Create(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

// The current epoch's order, position by position (PositionToIndex).
std::vector<uint64_t> Permutation(const Sampler& s) {
  std::vector<uint64_t> p(s.options().num_samples);
  for (uint64_t i = 0; i < p.size(); ++i) p[i] = s.PositionToIndex(i);
  return p;
}

std::string Describe(const SamplerOptions& o) {
  static const char* const kTail[] = {"short", "drop", "pad"};
  return "N=" + std::to_string(o.num_samples) + " W=" + std::to_string(o.world_size) +
         " rank=" + std::to_string(o.rank) + " B=" + std::to_string(o.batch_size) +
         " tail=" + kTail[static_cast<int>(o.tail)] + " drop_last=" + std::to_string(o.drop_last) +
         " shuffle=" + ShuffleModeName(o.shuffle) + " seed=" + std::to_string(o.seed);
}

struct PlannedBatch {
  std::vector<uint64_t> ids;
  std::vector<uint8_t> padding;
};

// Reads a rank's whole epoch through BatchSize/BatchSamples.
std::vector<PlannedBatch> EpochPlan(const Sampler& s) {
  std::vector<PlannedBatch> plan(s.batches_per_epoch());
  for (uint64_t b = 0; b < plan.size(); ++b) {
    const uint32_t size = s.BatchSize(b);
    plan[b].ids.assign(size, UINT64_MAX);
    plan[b].padding.assign(size, 2);
    s.BatchSamples(b, 0, size, plan[b].ids.data(), plan[b].padding.data());
  }
  return plan;
}

// The brute-force model of the header's contract: rank r takes permutation positions r, r + W,
// ...; kShort keeps its own share, kDrop the first floor(N/W) of them, kPad ceil(N/W) with
// positions past N wrapping to the permutation's start (flagged). Steps: ceil(largest share / B),
// or floor(smallest share / B) with drop_last, so that every rank runs the same number.
std::vector<PlannedBatch> ModelPlan(const std::vector<uint64_t>& perm, const SamplerOptions& o) {
  const uint64_t n = o.num_samples, w = o.world_size, b = o.batch_size, r = o.rank;
  auto own_share = [&](uint64_t rank) { return n > rank ? (n - rank + w - 1) / w : 0; };
  uint64_t share = 0, min_share = 0, max_share = 0;
  switch (o.tail) {
    case TailPolicy::kShort:
      share = own_share(r);
      min_share = n / w;
      max_share = (n + w - 1) / w;
      break;
    case TailPolicy::kDrop:
      share = min_share = max_share = n / w;
      break;
    case TailPolicy::kPad:
      share = min_share = max_share = n == 0 ? 0 : (n + w - 1) / w;
      break;
  }
  const uint64_t steps = o.drop_last ? min_share / b : (max_share + b - 1) / b;
  std::vector<PlannedBatch> plan(steps);
  for (uint64_t j = 0; j < steps; ++j) {
    for (uint64_t k = j * b; k < std::min((j + 1) * b, share); ++k) {
      const uint64_t position = k * w + r;
      plan[j].ids.push_back(perm[position % n]);
      plan[j].padding.push_back(position >= n ? 1 : 0);
    }
  }
  return plan;
}

// The permutation as the header specifies it (a keyed Feistel network with cycle walking),
// written independently of sampler.cc.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr uint64_t kG = 0x9E3779B97F4A7C15ull;

uint64_t EpochKey(uint64_t seed, uint64_t epoch) { return Mix(seed ^ Mix(epoch + kG)); }

// Perm(n, key) of the header, materialised.
std::vector<uint64_t> ReferenceKeyedPermutation(uint64_t n, uint64_t key) {
  const uint64_t g = kG;
  std::vector<uint64_t> p(n);
  if (n <= 1) {
    std::iota(p.begin(), p.end(), uint64_t{0});
    return p;
  }
  int k = 2;
  while ((uint64_t{1} << k) < n) ++k;
  const int b = k / 2, a = k - b;
  const uint64_t mask = (uint64_t{1} << b) - 1;
  uint64_t round_keys[6];
  for (int i = 0; i < 6; ++i) round_keys[i] = Mix(key + (i + 1) * g);
  auto encrypt = [&](uint64_t x) {
    uint64_t l = x >> b, r = x & mask;
    for (int i = 0; i < 6; ++i) {
      if (i % 2 == 0) {
        l ^= Mix(r ^ round_keys[i]) >> (64 - a);
      } else {
        r ^= Mix(l ^ round_keys[i]) >> (64 - b);
      }
    }
    return (l << b) | r;
  };
  for (uint64_t x = 0; x < n; ++x) {
    uint64_t y = encrypt(x);
    while (y >= n) y = encrypt(y);
    p[x] = y;
  }
  return p;
}

std::vector<uint64_t> ReferencePermutation(uint64_t n, uint64_t seed, uint64_t epoch) {
  return ReferenceKeyedPermutation(n, EpochKey(seed, epoch));
}

// Rank r's kBlock sequence as the header specifies it, materialised: its dealt blocks, the tail
// block inserted, concatenated, then shuffled within windows.
std::vector<uint64_t> ReferenceBlockSequence(const SamplerOptions& o, uint64_t epoch,
                                             uint32_t rank) {
  const uint64_t n = o.num_samples, w = o.world_size;
  const uint64_t s =
      std::clamp<uint64_t>(o.block_samples, 1, std::max<uint64_t>(1, n / (kMinBlocksPerRank * w)));
  const uint64_t m = n / s, t = n % s, ke = EpochKey(o.seed, epoch);
  const std::vector<uint64_t> q = ReferenceKeyedPermutation(m, Mix(ke ^ 0x426C6F636B4F7264ull));
  std::vector<std::pair<uint64_t, uint64_t>> blocks;  // (first sample, count)
  for (uint64_t pos = rank; pos < m; pos += w) blocks.push_back({q[pos] * s, s});
  if (t > 0 && rank == m % w) {
    const uint64_t slot = static_cast<uint64_t>(
        (static_cast<__uint128_t>(Mix(ke ^ 0x5461696C426C6B21ull)) * (blocks.size() + 1)) >> 64);
    blocks.insert(blocks.begin() + slot, {m * s, t});
  }
  std::vector<uint64_t> concat;
  std::vector<uint64_t> block_start;
  for (const auto& [first, count] : blocks) {
    block_start.push_back(concat.size());
    for (uint64_t i = 0; i < count; ++i) concat.push_back(first + i);
  }
  block_start.push_back(concat.size());
  std::vector<uint64_t> out(concat.size());
  for (uint64_t win = 0; win * o.window_blocks < blocks.size(); ++win) {
    const uint64_t a = block_start[win * o.window_blocks];
    const uint64_t e = block_start[std::min<uint64_t>(blocks.size(), (win + 1) * o.window_blocks)];
    const uint64_t key = Mix(Mix(Mix(ke ^ 0x57696E646F775368ull) + rank) + win);
    const std::vector<uint64_t> perm = ReferenceKeyedPermutation(e - a, key);
    for (uint64_t off = 0; off < e - a; ++off) out[a + off] = concat[a + perm[off]];
  }
  return out;
}

std::vector<uint64_t> Identity(uint64_t n) {
  std::vector<uint64_t> p(n);
  std::iota(p.begin(), p.end(), uint64_t{0});
  return p;
}

bool IsPermutation(std::vector<uint64_t> p) {
  std::sort(p.begin(), p.end());
  return p == Identity(p.size());
}

// All ranks' plans for one configuration (rank in `o` ignored).
std::vector<std::vector<PlannedBatch>> AllRanks(SamplerOptions o, uint64_t epoch = 0) {
  std::vector<std::vector<PlannedBatch>> ranks;
  for (uint32_t r = 0; r < o.world_size; ++r) {
    o.rank = r;
    Sampler s = MustCreate(o);
    s.SetEpoch(epoch);
    ranks.push_back(EpochPlan(s));
  }
  return ranks;
}

// ---------------------------------------------------------------------------------------------
// The permutation.

TEST(SamplerTest, SplitMix64MixMatchesPublishedValues) {
  // SplitMix64 seeded with 0 yields these first outputs (Steele, Lea, Flood; Vigna's reference).
  EXPECT_EQ(SplitMix64Mix(0x9E3779B97F4A7C15ull), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64Mix(0x9E3779B97F4A7C15ull * 2), 0x6E789E6AA1B965F4ull);
}

TEST(SamplerTest, PermutationIsAPermutation) {
  for (uint64_t n : {0, 1, 2, 3, 17, 1000, 4097}) {
    for (uint64_t epoch : {0, 1, 5}) {
      Sampler s = MustCreate(Options(n, 7, 1, 0, TailPolicy::kShort, false, true, 42));
      s.SetEpoch(epoch);
      EXPECT_EQ(s.epoch(), epoch);
      ASSERT_EQ(Permutation(s).size(), n);
      EXPECT_TRUE(IsPermutation(Permutation(s))) << "n=" << n << " epoch=" << epoch;
    }
  }
}

TEST(SamplerTest, PermutationFollowsTheHeaderSpecification) {
  // Even and odd bit counts k: 2 (n 2, 3), 4 (10), 7 (100, halves of 4 and 3 bits), 10 (1000),
  // 17 (70000).
  for (uint64_t n : {2, 3, 10, 100, 1000, 70000}) {
    for (uint64_t seed : {uint64_t{0}, uint64_t{7}, ~uint64_t{0}}) {
      for (uint64_t epoch : {0, 1, 2, 1000000}) {
        Sampler s = MustCreate(Options(n, 1, 1, 0, TailPolicy::kShort, false, true, seed));
        s.SetEpoch(epoch);
        EXPECT_EQ(Permutation(s), ReferencePermutation(n, seed, epoch))
            << "n=" << n << " seed=" << seed << " epoch=" << epoch;
      }
    }
  }
}

TEST(SamplerTest, PermutationDependsOnlyOnSeedAndEpoch) {
  // Two samplers with the same (seed, epoch) agree, whatever their rank, world size, batch
  // size, tail policy, drop_last and the epochs visited before.
  Sampler a = MustCreate(Options(500, 32, 1, 0, TailPolicy::kShort, false, true, 11));
  Sampler b = MustCreate(Options(500, 5, 4, 3, TailPolicy::kPad, true, true, 11));
  Sampler c = MustCreate(Options(500, 1, 7, 2, TailPolicy::kDrop, false, true, 11));
  a.SetEpoch(3);
  b.SetEpoch(9);
  b.SetEpoch(3);
  c.SetEpoch(3);
  EXPECT_EQ(Permutation(a), Permutation(b));
  EXPECT_EQ(Permutation(a), Permutation(c));
  // Going back to an epoch recomputes the same permutation.
  const std::vector<uint64_t> epoch3 = Permutation(a);
  a.SetEpoch(0);
  a.SetEpoch(3);
  EXPECT_EQ(Permutation(a), epoch3);
}

TEST(SamplerTest, DifferentEpochsAndSeedsGiveDifferentPermutations) {
  std::set<std::vector<uint64_t>> seen;
  for (uint64_t seed : {0, 1, 2}) {
    for (uint64_t epoch : {0, 1, 2, 3}) {
      Sampler s = MustCreate(Options(200, 8, 1, 0, TailPolicy::kShort, false, true, seed));
      s.SetEpoch(epoch);
      EXPECT_TRUE(seen.insert(Permutation(s)).second) << "seed=" << seed << " epoch=" << epoch;
      EXPECT_NE(Permutation(s), Identity(200));
    }
  }
}

TEST(SamplerTest, ShuffleOffIsTheIdentityEveryEpoch) {
  for (uint64_t epoch : {0, 1, 17}) {
    Sampler s = MustCreate(Options(123, 10, 1, 0, TailPolicy::kShort, false, false, 99));
    s.SetEpoch(epoch);
    EXPECT_EQ(Permutation(s), Identity(123));
  }
}

TEST(SamplerTest, ShuffleIsRoughlyUniform) {
  // The 6 orders of 3 samples over 6000 epochs: each expected 1000 times; the bounds are about
  // seven standard deviations wide, so a correct shuffle never fails.
  std::map<std::vector<uint64_t>, int> counts;
  Sampler s = MustCreate(Options(3, 1, 1, 0, TailPolicy::kShort, false, true, 5));
  for (uint64_t epoch = 0; epoch < 6000; ++epoch) {
    s.SetEpoch(epoch);
    ++counts[Permutation(s)];
  }
  EXPECT_EQ(counts.size(), 6u);
  for (const auto& [order, count] : counts) {
    EXPECT_GT(count, 800);
    EXPECT_LT(count, 1200);
  }
}

// ---------------------------------------------------------------------------------------------
// The batch plan.

TEST(SamplerTest, PlanMatchesBruteForceModel) {
  const uint64_t kN[] = {0, 1, 2, 3, 5, 7, 10, 31, 32, 33, 64, 100, 257, 1003};
  const uint32_t kW[] = {1, 2, 3, 4, 7, 8};
  const uint32_t kB[] = {1, 3, 8, 32, 64};
  const TailPolicy kTails[] = {TailPolicy::kShort, TailPolicy::kDrop, TailPolicy::kPad};
  int failures = 0;
  for (uint64_t n : kN) {
    for (uint32_t w : kW) {
      for (uint32_t b : kB) {
        for (TailPolicy tail : kTails) {
          for (bool drop_last : {false, true}) {
            uint64_t steps = UINT64_MAX;
            std::vector<uint64_t> seen(n, 0);  // real (non-padding) deliveries per sample
            uint64_t padded = 0;
            for (uint32_t r = 0; r < w; ++r) {
              const SamplerOptions o = Options(n, b, w, r, tail, drop_last, true, n + w + b);
              Sampler s = MustCreate(o);
              s.SetEpoch(1);
              const std::vector<PlannedBatch> got = EpochPlan(s);
              const std::vector<PlannedBatch> want = ModelPlan(Permutation(s), o);
              bool same = got.size() == want.size();
              uint64_t delivered = 0;
              for (size_t j = 0; same && j < got.size(); ++j) {
                same = got[j].ids == want[j].ids && got[j].padding == want[j].padding;
                delivered += got[j].ids.size();
                EXPECT_LE(got[j].ids.size(), b);
              }
              if (!same && ++failures <= 5) ADD_FAILURE() << "plan differs: " << Describe(o);
              if (!same) continue;
              EXPECT_EQ(s.samples_per_epoch(), delivered) << Describe(o);
              // Every rank runs the same number of steps.
              if (steps == UINT64_MAX) steps = s.batches_per_epoch();
              EXPECT_EQ(s.batches_per_epoch(), steps) << Describe(o);
              for (const PlannedBatch& batch : got) {
                for (size_t k = 0; k < batch.ids.size(); ++k) {
                  ASSERT_LT(batch.ids[k], n);
                  if (batch.padding[k]) {
                    ++padded;
                  } else {
                    ++seen[batch.ids[k]];
                  }
                }
              }
              // Reading a batch in pieces gives the same samples as reading it whole.
              for (uint64_t j = 0; j < got.size(); ++j) {
                const uint32_t size = s.BatchSize(j);
                std::vector<uint64_t> ids(size);
                std::vector<uint8_t> pad(size);
                for (uint32_t k = 0; k < size; k += 3) {
                  const uint32_t end = std::min(size, k + 3);
                  s.BatchSamples(j, k, end, ids.data() + k, pad.data() + k);
                }
                EXPECT_EQ(ids, got[j].ids) << Describe(o) << " batch " << j;
                EXPECT_EQ(pad, got[j].padding) << Describe(o) << " batch " << j;
              }
            }
            // Union over ranks, per policy, when no partial batch was dropped.
            const std::string what = "N=" + std::to_string(n) + " W=" + std::to_string(w) +
                                     " B=" + std::to_string(b) +
                                     " drop_last=" + std::to_string(drop_last);
            if (!drop_last) {
              uint64_t distinct = 0;
              for (uint64_t i = 0; i < n; ++i) {
                EXPECT_LE(seen[i], 1u) << what << " sample " << i;
                distinct += seen[i];
                if (tail != TailPolicy::kDrop) {
                  EXPECT_EQ(seen[i], 1u) << what << " sample " << i;
                }
              }
              if (tail == TailPolicy::kDrop) {
                EXPECT_EQ(distinct, n - n % w) << what;
              }
              if (tail == TailPolicy::kPad) {
                EXPECT_EQ(padded, n == 0 ? 0 : (n + w - 1) / w * w - n) << what;
              } else {
                EXPECT_EQ(padded, 0u) << what;
              }
            } else {
              for (uint64_t i = 0; i < n; ++i) EXPECT_LE(seen[i], 1u) << what << " sample " << i;
            }
          }
        }
      }
    }
  }
}

TEST(SamplerTest, BatchSizesForEveryTailPolicy) {
  // 10 samples, 3 ranks, batch 2: shares 4/3/3 (kShort), 3 (kDrop), 4 (kPad).
  struct Case {
    TailPolicy tail;
    bool drop_last;
    uint32_t rank;
    uint64_t batches;
    std::vector<uint32_t> sizes;
  };
  const Case cases[] = {
      {TailPolicy::kShort, false, 0, 2, {2, 2}}, {TailPolicy::kShort, false, 1, 2, {2, 1}},
      {TailPolicy::kShort, true, 0, 1, {2}},     {TailPolicy::kShort, true, 2, 1, {2}},
      {TailPolicy::kDrop, false, 0, 2, {2, 1}},  {TailPolicy::kDrop, true, 1, 1, {2}},
      {TailPolicy::kPad, false, 2, 2, {2, 2}},   {TailPolicy::kPad, true, 2, 2, {2, 2}},
  };
  for (const Case& c : cases) {
    const SamplerOptions o = Options(10, 2, 3, c.rank, c.tail, c.drop_last, false);
    Sampler s = MustCreate(o);
    ASSERT_EQ(s.batches_per_epoch(), c.batches) << Describe(o);
    for (uint64_t b = 0; b < c.batches; ++b) EXPECT_EQ(s.BatchSize(b), c.sizes[b]) << Describe(o);
  }
}

TEST(SamplerTest, InvalidOptionsAreRejected) {
  struct Case {
    SamplerOptions options;
    const char* why;
  };
  const Case cases[] = {
      {Options(10, 0), "batch_size 0"},
      {Options(10, 4, 0, 0), "world_size 0"},
      {Options(10, 4, 2, 2), "rank == world_size"},
      {Options(10, 4, 2, 7), "rank > world_size"},
  };
  for (const Case& c : cases) {
    Result<Sampler> s = Sampler::Create(c.options);
    ASSERT_FALSE(s.ok()) << c.why;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << c.why;
    EXPECT_FALSE(s.status().message().empty()) << c.why;
  }
  // Boundary values that are valid.
  EXPECT_TRUE(Sampler::Create(Options(0, 1)).ok());
  EXPECT_TRUE(Sampler::Create(Options(10, 1, 3, 2)).ok());
}

// ---------------------------------------------------------------------------------------------
// The keyed bijection and the block order.

TEST(SamplerTest, IndexPermutationInverseUndoesIt) {
  for (uint64_t n : {2, 3, 4, 5, 17, 1000, 65537}) {
    const IndexPermutation p(n, 0x1234 + n);
    std::vector<uint8_t> hit(n, 0);
    for (uint64_t x = 0; x < n; ++x) {
      const uint64_t y = p(x);
      ASSERT_LT(y, n);
      EXPECT_EQ(hit[y]++, 0) << "n=" << n << " y=" << y;
      EXPECT_EQ(p.Inverse(y), x) << "n=" << n;
    }
  }
  // The largest domains: 64-bit positions still map to valid positions and back.
  const IndexPermutation big(~uint64_t{0}, 7);
  for (uint64_t x : {uint64_t{0}, uint64_t{1} << 40, ~uint64_t{0} - 1}) {
    const uint64_t y = big(x);
    EXPECT_LT(y, ~uint64_t{0});
    EXPECT_EQ(big.Inverse(y), x);
  }
}

SamplerOptions BlockOptions(uint64_t n, uint32_t batch, uint32_t world, uint32_t rank,
                            uint64_t block, uint32_t window, TailPolicy tail = TailPolicy::kShort,
                            bool drop_last = false, uint64_t seed = 5) {
  SamplerOptions o = Options(n, batch, world, rank, tail, drop_last, true, seed);
  o.shuffle = ShuffleMode::kBlock;
  o.block_samples = block;
  o.window_blocks = window;
  return o;
}

TEST(SamplerTest, BlockOrderFollowsTheHeaderSpecification) {
  int failures = 0;
  for (uint64_t n : {0, 1, 7, 64, 100, 257, 1000}) {
    for (uint32_t w : {1, 2, 3, 8}) {
      for (uint64_t block : {1, 4, 10, 64, 5000}) {
        for (uint32_t window : {1, 3, 16}) {
          for (uint32_t r = 0; r < w; ++r) {
            const SamplerOptions o = BlockOptions(n, 8, w, r, block, window);
            Sampler s = MustCreate(o);
            s.SetEpoch(3);
            const std::vector<uint64_t> want = ReferenceBlockSequence(o, 3, r);
            std::vector<uint64_t> got;
            for (const PlannedBatch& b : EpochPlan(s))
              got.insert(got.end(), b.ids.begin(), b.ids.end());
            std::vector<uint64_t> by_position(want.size());
            for (uint64_t p = 0; p < want.size(); ++p) by_position[p] = s.PositionToIndex(p);
            if ((got != want || by_position != want) && ++failures <= 5) {
              ADD_FAILURE() << "block order differs: " << Describe(o) << " block=" << block
                            << " window=" << window;
            }
          }
        }
      }
    }
  }
}

// A block larger than N / W would deal every sample to a few ranks and leave the others empty
// (or all padding) batches: the sampler caps the block so each rank gets at least
// kMinBlocksPerRank blocks, and rank shares differ by at most one block plus the tail.
TEST(SamplerTest, BlockOrderCapsBlocksSoEveryRankGetsItsShare) {
  for (uint64_t n : {1000, 4096, 100003}) {
    for (uint32_t w : {2, 4, 8}) {
      uint64_t min_share = UINT64_MAX, max_share = 0, total = 0;
      for (uint32_t r = 0; r < w; ++r) {
        Sampler s = MustCreate(BlockOptions(n, 64, w, r, /*block=*/n * 10, 16));
        EXPECT_LE(s.block_samples() * kMinBlocksPerRank * w, n) << "N=" << n << " W=" << w;
        EXPECT_GE(s.rank_blocks(), kMinBlocksPerRank) << "N=" << n << " W=" << w << " r=" << r;
        min_share = std::min(min_share, s.samples_per_epoch());
        max_share = std::max(max_share, s.samples_per_epoch());
        total += s.samples_per_epoch();
      }
      EXPECT_EQ(total, n);
      const uint64_t block = std::max<uint64_t>(1, n / (kMinBlocksPerRank * w));
      EXPECT_LE(max_share - min_share, 2 * block) << "N=" << n << " W=" << w;
    }
  }
}

// The block order's guarantees for every tail policy: equal steps on every rank, every sample
// exactly once across ranks (kShort; kDrop at most once; kPad once plus flagged padding), each
// rank reading only samples of its own blocks, and the blocks reported by RankBlock/BatchBlocks
// covering what each batch reads.
TEST(SamplerTest, BlockOrderGuarantees) {
  const TailPolicy kTails[] = {TailPolicy::kShort, TailPolicy::kDrop, TailPolicy::kPad};
  for (uint64_t n : {0, 1, 5, 99, 100, 1001}) {
    for (uint32_t w : {1, 2, 3, 4, 8}) {
      for (uint64_t block : {1, 7, 32}) {
        for (TailPolicy tail : kTails) {
          for (bool drop_last : {false, true}) {
            const std::string what = "N=" + std::to_string(n) + " W=" + std::to_string(w) +
                                     " block=" + std::to_string(block) +
                                     " tail=" + std::to_string(static_cast<int>(tail)) +
                                     " drop_last=" + std::to_string(drop_last);
            std::vector<int> seen(n, 0);
            std::vector<int> owner(n, -1);
            uint64_t steps = UINT64_MAX, padded = 0;
            for (uint32_t r = 0; r < w; ++r) {
              Sampler s = MustCreate(BlockOptions(n, 6, w, r, block, 2, tail, drop_last));
              s.SetEpoch(1);
              if (steps == UINT64_MAX) steps = s.batches_per_epoch();
              ASSERT_EQ(s.batches_per_epoch(), steps) << what;
              std::set<uint64_t> own;
              for (uint64_t j = 0; j < s.rank_blocks(); ++j) {
                const SampleRange range = s.RankBlock(j);
                for (uint64_t i = range.begin; i < range.begin + range.count; ++i) {
                  ASSERT_LT(i, n) << what;
                  EXPECT_EQ(owner[i], -1) << what << " sample " << i << " in two blocks";
                  owner[i] = static_cast<int>(r);
                  own.insert(i);
                }
              }
              const std::vector<PlannedBatch> plan = EpochPlan(s);
              for (uint64_t b = 0; b < plan.size(); ++b) {
                uint64_t first = 0, end = 0;
                s.BatchBlocks(b, &first, &end);
                std::set<uint64_t> covered;
                for (uint64_t j = first; j < end; ++j) {
                  const SampleRange range = s.RankBlock(j);
                  for (uint64_t i = range.begin; i < range.begin + range.count; ++i)
                    covered.insert(i);
                }
                for (size_t k = 0; k < plan[b].ids.size(); ++k) {
                  const uint64_t id = plan[b].ids[k];
                  if (plan[b].padding[k]) {
                    ++padded;
                    continue;
                  }
                  ++seen[id];
                  EXPECT_TRUE(own.count(id)) << what << " rank " << r << " reads sample " << id
                                             << " of another rank's block";
                  EXPECT_TRUE(covered.count(id)) << what << " batch " << b << " sample " << id;
                }
              }
            }
            for (uint64_t i = 0; i < n; ++i) {
              EXPECT_LE(seen[i], 1) << what << " sample " << i;
              if (!drop_last && tail != TailPolicy::kDrop) {
                EXPECT_EQ(seen[i], 1) << what;
              }
            }
            if (tail != TailPolicy::kPad) {
              EXPECT_EQ(padded, 0u) << what;
            }
          }
        }
      }
    }
  }
}

TEST(SamplerTest, BlockOrderChangesWithEpochAndSeed) {
  const SamplerOptions o = BlockOptions(1000, 10, 1, 0, 10, 4);
  std::set<std::vector<uint64_t>> seen;
  for (uint64_t seed : {1, 2}) {
    for (uint64_t epoch : {0, 1, 2}) {
      SamplerOptions with_seed = o;
      with_seed.seed = seed;
      Sampler s = MustCreate(with_seed);
      s.SetEpoch(epoch);
      std::vector<uint64_t> order;
      for (uint64_t p = 0; p < 1000; ++p) order.push_back(s.PositionToIndex(p));
      EXPECT_TRUE(IsPermutation(order));
      EXPECT_TRUE(seen.insert(order).second) << "seed " << seed << " epoch " << epoch;
    }
  }
}

TEST(SamplerTest, BlockOptionsAreChecked) {
  SamplerOptions o = BlockOptions(100, 4, 1, 0, 0, 4);
  EXPECT_EQ(Sampler::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = BlockOptions(100, 4, 1, 0, 4, 0);
  EXPECT_EQ(Sampler::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = BlockOptions(100, 4, 1, 0, 4, (1u << 20) + 1);
  EXPECT_EQ(Sampler::Create(o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseShuffleMode("block").value(), ShuffleMode::kBlock);
  EXPECT_EQ(ParseShuffleMode("Block").status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Shuffle quality of the exact order on 10^6 samples (README, "Shuffle quality").
//
// Pearson's chi-square statistic of a K x L contingency table of counts against independence
// (expected count row_total * column_total / total per cell) has (K - 1)(L - 1) degrees of
// freedom; for large dof it is close to normal with mean dof and variance 2 dof. A table is
// accepted below dof + 6 sqrt(2 dof) (a false alarm about once in 10^9).

double ChiSquare(const std::vector<std::vector<uint64_t>>& table) {
  const size_t rows = table.size(), cols = table[0].size();
  std::vector<double> row(rows, 0), col(cols, 0);
  double total = 0;
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < cols; ++j) {
      row[i] += table[i][j];
      col[j] += table[i][j];
      total += table[i][j];
    }
  }
  double chi = 0;
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < cols; ++j) {
      const double expected = row[i] * col[j] / total;
      const double d = table[i][j] - expected;
      chi += d * d / expected;
    }
  }
  return chi;
}

double Threshold(size_t rows, size_t cols) {
  const double dof = static_cast<double>((rows - 1) * (cols - 1));
  return dof + 6 * std::sqrt(2 * dof);
}

// Too regular is as suspicious as too uneven: a structured order gives a statistic far below
// its degrees of freedom.
double LowerThreshold(size_t rows, size_t cols) {
  const double dof = static_cast<double>((rows - 1) * (cols - 1));
  return dof - 6 * std::sqrt(2 * dof);
}

TEST(SamplerTest, ShuffleQualityChiSquareOnAMillionSamples) {
  constexpr uint64_t kN = 1000000, kBuckets = 100, kRanks = 8;
  constexpr uint64_t kBucket = kN / kBuckets;
  std::vector<std::vector<uint64_t>> previous_position;  // per epoch: sample -> position
  Sampler s = MustCreate(Options(kN, 64, 1, 0, TailPolicy::kShort, false, true, 12345));
  std::vector<uint64_t> position_of(kN), last_position_of(kN);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    s.SetEpoch(epoch);
    // Positions by bucket x samples by bucket: no region of the order prefers a region of the
    // dataset. Ranks x samples by bucket: no rank prefers a region of the dataset.
    std::vector<std::vector<uint64_t>> by_position(kBuckets, std::vector<uint64_t>(kBuckets));
    std::vector<std::vector<uint64_t>> by_rank(kRanks, std::vector<uint64_t>(kBuckets));
    std::vector<uint8_t> hit(kN, 0);
    for (uint64_t p = 0; p < kN; ++p) {
      const uint64_t i = s.PositionToIndex(p);
      ASSERT_LT(i, kN);
      ASSERT_EQ(hit[i]++, 0) << "sample " << i << " twice in epoch " << epoch;
      ++by_position[p / kBucket][i / kBucket];
      ++by_rank[p % kRanks][i / kBucket];
      position_of[i] = p;
    }
    const double chi_position = ChiSquare(by_position), chi_rank = ChiSquare(by_rank);
    EXPECT_LT(chi_position, Threshold(kBuckets, kBuckets)) << "epoch " << epoch;
    EXPECT_LT(chi_rank, Threshold(kRanks, kBuckets)) << "epoch " << epoch;
    EXPECT_GT(chi_position, LowerThreshold(kBuckets, kBuckets)) << "epoch " << epoch;
    EXPECT_GT(chi_rank, LowerThreshold(kRanks, kBuckets)) << "epoch " << epoch;
    if (epoch > 0) {
      // Consecutive epochs: a sample's position bucket in epoch e says nothing of its bucket in
      // e + 1, and the orders differ (about one fixed point expected, not thousands).
      std::vector<std::vector<uint64_t>> across(kBuckets, std::vector<uint64_t>(kBuckets));
      uint64_t same_position = 0;
      for (uint64_t i = 0; i < kN; ++i) {
        ++across[last_position_of[i] / kBucket][position_of[i] / kBucket];
        same_position += last_position_of[i] == position_of[i];
      }
      EXPECT_LT(ChiSquare(across), Threshold(kBuckets, kBuckets))
          << "epochs " << epoch - 1 << ", " << epoch;
      EXPECT_LT(same_position, 20u) << "epochs " << epoch - 1 << ", " << epoch;
    }
    last_position_of = position_of;
  }
  // The statistic does detect an order that is not shuffled: dataset order fails at once.
  std::vector<std::vector<uint64_t>> identity(kBuckets, std::vector<uint64_t>(kBuckets));
  for (uint64_t p = 0; p < kN; ++p) ++identity[p / kBucket][p / kBucket];
  EXPECT_GT(ChiSquare(identity), 100 * Threshold(kBuckets, kBuckets));
}

// ---------------------------------------------------------------------------------------------
// Field cases.

// B29: 1003 samples, 3 ranks, batch 64, drop_last off, shuffle off.
TEST(SamplerTest, FieldCase_B29_NoPaddingSplitsExactly) {
  const auto ranks = AllRanks(Options(1003, 64, 3, 0, TailPolicy::kShort, false, false));
  const uint64_t counts[] = {335, 334, 334};
  const uint32_t last[] = {15, 14, 14};
  std::set<uint64_t> all;
  uint64_t total = 0;
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_EQ(ranks[r].size(), 6u) << "rank " << r;
    EXPECT_EQ(ranks[r].back().ids.size(), last[r]) << "rank " << r;
    uint64_t count = 0;
    for (const PlannedBatch& b : ranks[r]) {
      count += b.ids.size();
      for (size_t k = 0; k < b.ids.size(); ++k) {
        EXPECT_EQ(b.padding[k], 0);
        all.insert(b.ids[k]);
      }
    }
    EXPECT_EQ(count, counts[r]) << "rank " << r;
    total += count;
  }
  EXPECT_EQ(total, 1003u);
  EXPECT_EQ(all.size(), 1003u);
  EXPECT_EQ(*all.rbegin(), 1002u);
}

TEST(SamplerTest, FieldCase_B29_PaddingModeFlagsTwoSamples) {
  const auto ranks = AllRanks(Options(1003, 64, 3, 0, TailPolicy::kPad, false, false));
  uint64_t padded = 0;
  std::set<uint64_t> real;
  for (uint32_t r = 0; r < 3; ++r) {
    uint64_t count = 0;
    for (const PlannedBatch& b : ranks[r]) {
      count += b.ids.size();
      for (size_t k = 0; k < b.ids.size(); ++k) {
        if (b.padding[k]) {
          ++padded;
        } else {
          EXPECT_TRUE(real.insert(b.ids[k]).second) << "sample " << b.ids[k] << " twice";
        }
      }
    }
    EXPECT_EQ(count, 335u) << "rank " << r;
    EXPECT_EQ(ranks[r].size(), 6u);
  }
  EXPECT_EQ(padded, 2u);
  EXPECT_EQ(real.size(), 1003u);
}

// B31: 1000 samples, seed 7, epochs 0-2; a repeat run; seed 8; a fresh start at epoch 2.
TEST(SamplerTest, FieldCase_B31_EpochsReshuffleAndReplay) {
  const SamplerOptions o7 = Options(1000, 32, 1, 0, TailPolicy::kShort, false, true, 7);
  Sampler run = MustCreate(o7);
  std::vector<std::vector<uint64_t>> orders;
  std::vector<std::vector<PlannedBatch>> plans;
  for (uint64_t e = 0; e < 3; ++e) {
    run.SetEpoch(e);
    orders.push_back(Permutation(run));
    plans.push_back(EpochPlan(run));
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[0], orders[2]);
  EXPECT_NE(orders[1], orders[2]);

  Sampler repeat = MustCreate(o7);
  SamplerOptions o8 = o7;
  o8.seed = 8;
  Sampler seed8 = MustCreate(o8);
  for (uint64_t e = 0; e < 3; ++e) {
    repeat.SetEpoch(e);
    EXPECT_EQ(Permutation(repeat), orders[e]) << "epoch " << e;
    seed8.SetEpoch(e);
    EXPECT_NE(Permutation(seed8), orders[e]) << "epoch " << e;
  }

  Sampler fresh = MustCreate(o7);  // a new process resuming at epoch 2
  fresh.SetEpoch(2);
  EXPECT_EQ(Permutation(fresh), orders[2]);
  const std::vector<PlannedBatch> fresh_plan = EpochPlan(fresh);
  ASSERT_EQ(fresh_plan.size(), plans[2].size());
  for (size_t b = 0; b < fresh_plan.size(); ++b) EXPECT_EQ(fresh_plan[b].ids, plans[2][b].ids);
}

// B33 (a): 42 samples, batch 16, drop_last off, shuffle off, 2 epochs.
TEST(SamplerTest, FieldCase_B33_LastPartialBatch) {
  Sampler s = MustCreate(Options(42, 16, 1, 0, TailPolicy::kShort, false, false));
  for (uint64_t e = 0; e < 2; ++e) {
    s.SetEpoch(e);
    ASSERT_EQ(s.batches_per_epoch(), 3u);
    EXPECT_EQ(s.samples_per_epoch(), 42u);
    const std::vector<PlannedBatch> plan = EpochPlan(s);
    ASSERT_EQ(plan.size(), 3u);
    EXPECT_EQ(plan[0].ids.size(), 16u);
    EXPECT_EQ(plan[1].ids.size(), 16u);
    EXPECT_EQ(plan[2].ids.size(), 10u);
    std::vector<uint64_t> ids;
    for (const PlannedBatch& b : plan) ids.insert(ids.end(), b.ids.begin(), b.ids.end());
    EXPECT_EQ(ids, Identity(42)) << "epoch " << e;  // 0..41 once; each epoch starts at id 0
  }
}

// B33 (b): 100 samples, batch 32, drop_last: 3 full batches, the same 3 every epoch.
TEST(SamplerTest, FieldCase_B33_DropLastNoCarryOver) {
  Sampler s = MustCreate(Options(100, 32, 1, 0, TailPolicy::kShort, true, false));
  std::vector<PlannedBatch> first;
  for (uint64_t e = 0; e < 3; ++e) {
    s.SetEpoch(e);
    ASSERT_EQ(s.batches_per_epoch(), 3u);
    EXPECT_EQ(s.samples_per_epoch(), 96u);
    const std::vector<PlannedBatch> plan = EpochPlan(s);
    ASSERT_EQ(plan.size(), 3u);
    for (const PlannedBatch& b : plan) EXPECT_EQ(b.ids.size(), 32u);
    if (e == 0) {
      first = plan;
      EXPECT_EQ(plan[0].ids.front(), 0u);
      EXPECT_EQ(plan[2].ids.back(), 95u);
    } else {
      for (size_t b = 0; b < 3; ++b) EXPECT_EQ(plan[b].ids, first[b].ids) << "epoch " << e;
    }
  }
  // Shuffled: 3 full batches of 96 distinct samples every epoch.
  Sampler shuffled = MustCreate(Options(100, 32, 1, 0, TailPolicy::kShort, true, true, 1));
  for (uint64_t e = 0; e < 3; ++e) {
    shuffled.SetEpoch(e);
    std::set<uint64_t> ids;
    for (const PlannedBatch& b : EpochPlan(shuffled)) {
      EXPECT_EQ(b.ids.size(), 32u);
      ids.insert(b.ids.begin(), b.ids.end());
    }
    EXPECT_EQ(ids.size(), 96u);
  }
}

// B33 (c): 10 samples, batch 32.
TEST(SamplerTest, FieldCase_B33_FewerSamplesThanOneBatch) {
  Sampler dropped = MustCreate(Options(10, 32, 1, 0, TailPolicy::kShort, true, false));
  EXPECT_EQ(dropped.batches_per_epoch(), 0u);
  EXPECT_EQ(dropped.samples_per_epoch(), 0u);
  EXPECT_TRUE(EpochPlan(dropped).empty());

  Sampler kept = MustCreate(Options(10, 32, 1, 0, TailPolicy::kShort, false, false));
  ASSERT_EQ(kept.batches_per_epoch(), 1u);
  EXPECT_EQ(kept.BatchSize(0), 10u);
  EXPECT_EQ(EpochPlan(kept)[0].ids, Identity(10));
}

// B34: 1001 samples, 4 ranks, batch 250, drop_last off.
TEST(SamplerTest, FieldCase_B34_EqualStepsOnEveryRank) {
  struct Case {
    TailPolicy tail;
    uint64_t per_rank[4];
    uint64_t total;
    uint64_t padded;
  };
  const Case cases[] = {
      {TailPolicy::kShort, {251, 250, 250, 250}, 1001, 0},
      {TailPolicy::kPad, {251, 251, 251, 251}, 1004, 3},
      {TailPolicy::kDrop, {250, 250, 250, 250}, 1000, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.tail));
    // Steps are known before any epoch is set, and equal on every rank.
    std::vector<uint64_t> steps;
    for (uint32_t r = 0; r < 4; ++r) {
      Sampler s = MustCreate(Options(1001, 250, 4, r, c.tail, false, true, 3));
      steps.push_back(s.batches_per_epoch());
      EXPECT_EQ(s.samples_per_epoch(), c.per_rank[r]) << "rank " << r;
    }
    for (uint64_t st : steps) EXPECT_EQ(st, steps[0]);
    EXPECT_EQ(steps[0], c.tail == TailPolicy::kDrop ? 1u : 2u);

    const auto ranks = AllRanks(Options(1001, 250, 4, 0, c.tail, false, true, 3), 5);
    std::set<uint64_t> real;
    uint64_t total = 0, padded = 0;
    for (uint32_t r = 0; r < 4; ++r) {
      ASSERT_EQ(ranks[r].size(), steps[0]);
      uint64_t count = 0;
      for (const PlannedBatch& b : ranks[r]) {
        count += b.ids.size();
        for (size_t k = 0; k < b.ids.size(); ++k) {
          if (b.padding[k]) {
            ++padded;
          } else {
            EXPECT_TRUE(real.insert(b.ids[k]).second);
          }
        }
      }
      EXPECT_EQ(count, c.per_rank[r]) << "rank " << r;
      total += count;
    }
    EXPECT_EQ(total, c.total);
    EXPECT_EQ(padded, c.padded);
    EXPECT_EQ(real.size(), c.total - c.padded);
  }
}

}  // namespace
}  // namespace kiln
