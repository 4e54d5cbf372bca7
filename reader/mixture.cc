#include "reader/mixture.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "reader/sampler.h"

namespace kiln {

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
// Domain-separation tags (ASCII "MixWindw", "MixPass!").
constexpr uint64_t kMixWindowTag = 0x4D697857696E6477ull;
constexpr uint64_t kMixPassTag = 0x4D69785061737321ull;

uint64_t MulDiv(uint64_t a, uint64_t b, uint64_t d) {
  return static_cast<uint64_t>(static_cast<__uint128_t>(a) * b / d);
}

// K_e of reader/sampler.h: the epoch key.
uint64_t EpochKey(uint64_t seed, uint64_t epoch) {
  return SplitMix64Mix(seed ^ SplitMix64Mix(epoch + kGolden));
}

uint64_t WindowKey(uint64_t epoch_key, uint64_t window) {
  return SplitMix64Mix(SplitMix64Mix(epoch_key ^ kMixWindowTag) + window);
}

uint64_t PassKey(uint64_t seed, uint32_t source, uint64_t pass) {
  return SplitMix64Mix(SplitMix64Mix(SplitMix64Mix(seed ^ kMixPassTag) + source) + pass);
}

// Perm(n, key) of reader/sampler.h ("IndexPermutation") for a window's n <= kMixtureWindow =
// 256 positions: k <= 8 bits, so each Feistel half has at most 4 bits and each round's function
// takes at most 16 inputs. The rounds are tabulated once per window (6 x 16 mixes), and a
// position costs 6 table lookups instead of 6 mixes: the same bijection, cheaper once a window
// serves more than a few dozen positions.
class WindowTable {
 public:
  static_assert(kMixtureWindow <= 256, "halves of at most 4 bits");
  WindowTable(uint64_t n, uint64_t key) : n_(n) {
    if (n <= 1) return;
    uint32_t bits = 64 - static_cast<uint32_t>(__builtin_clzll(n - 1));  // ceil(log2 n)
    bits = std::max<uint32_t>(bits, 2);
    right_bits_ = bits / 2;
    const uint32_t left_bits = bits - right_bits_;
    mask_ = (1u << right_bits_) - 1;
    for (int i = 0; i < kFeistelRounds; ++i) {
      const uint64_t round_key = SplitMix64Mix(key + static_cast<uint64_t>(i + 1) * kGolden);
      // Even rounds: L ^= F(R), R of right_bits; odd rounds: R ^= F(L), L of left_bits.
      const uint32_t in_bits = i % 2 == 0 ? right_bits_ : left_bits;
      const uint32_t out_bits = i % 2 == 0 ? left_bits : right_bits_;
      for (uint32_t v = 0; v < (1u << in_bits); ++v) {
        table_[i][v] = static_cast<uint8_t>(SplitMix64Mix(v ^ round_key) >> (64 - out_bits));
      }
    }
  }
  uint64_t operator()(uint64_t x) const {
    if (n_ <= 1) return x;
    uint32_t y = static_cast<uint32_t>(x);
    do {
      uint32_t l = y >> right_bits_, r = y & mask_;
      for (int i = 0; i < kFeistelRounds; i += 2) {
        l ^= table_[i][r];
        r ^= table_[i + 1][l];
      }
      y = (l << right_bits_) | r;
    } while (y >= n_);
    return y;
  }

 private:
  uint64_t n_ = 0;
  uint32_t right_bits_ = 1;
  uint32_t mask_ = 1;
  uint8_t table_[kFeistelRounds][16] = {};
};

// Largest-remainder apportionment of `total` in proportion to `shares` (ties to the lower index).
std::vector<uint64_t> Apportion(uint64_t total, const std::vector<double>& shares) {
  double sum = 0;
  for (double w : shares) sum += w;
  std::vector<uint64_t> quotas(shares.size());
  std::vector<double> remainders(shares.size());
  uint64_t given = 0;
  for (size_t s = 0; s < shares.size(); ++s) {
    const double exact = static_cast<double>(total) * (shares[s] / sum);
    quotas[s] = static_cast<uint64_t>(std::floor(exact));
    remainders[s] = exact - std::floor(exact);
    given += quotas[s];
  }
  // Rounding may overshoot by a sample or two: take them back from the largest quotas.
  while (given > total) {
    const size_t s =
        static_cast<size_t>(std::max_element(quotas.begin(), quotas.end()) - quotas.begin());
    --quotas[s];
    --given;
  }
  std::vector<size_t> order(shares.size());
  for (size_t s = 0; s < order.size(); ++s) order[s] = s;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return remainders[a] > remainders[b]; });
  for (size_t r = 0; given < total; r = (r + 1) % order.size(), ++given) ++quotas[order[r]];
  return quotas;
}

Status CheckSpecs(const std::vector<MixtureSourceSpec>& sources) {
  if (sources.empty()) return Status::InvalidArgument("mixture: no sources");
  if (sources.size() > kMaxMixtureSources) {
    return Status::InvalidArgument("mixture: " + std::to_string(sources.size()) +
                                   " sources; at most " + std::to_string(kMaxMixtureSources));
  }
  const bool weights = sources[0].weight != 0;
  for (size_t s = 0; s < sources.size(); ++s) {
    const MixtureSourceSpec& src = sources[s];
    const std::string what = "mixture source " + std::to_string(s) + " (" + src.name + ")";
    if (src.num_samples == 0) return Status::InvalidArgument(what + " has no samples");
    if ((src.weight != 0) == (src.repeat != 0)) {
      return Status::InvalidArgument(what + ": give exactly one of weight and repeat");
    }
    const double v = src.weight != 0 ? src.weight : src.repeat;
    if (!(v > 0) || !std::isfinite(v)) {
      return Status::InvalidArgument(what + ": " + (src.weight != 0 ? "weight " : "repeat ") +
                                     std::to_string(v) + " must be > 0 and finite");
    }
    if ((src.weight != 0) != weights) {
      return Status::InvalidArgument(what + " has a " + (weights ? "repeat" : "weight") +
                                     " but source 0 has a " + (weights ? "weight" : "repeat") +
                                     ": give every source a weight, or every source a repeat");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<MixtureSchedule> MixtureSchedule::Create(const std::vector<MixtureSourceSpec>& sources,
                                                uint64_t samples_per_epoch) {
  KILN_RETURN_IF_ERROR(CheckSpecs(sources));
  const bool weights = sources[0].weight != 0;
  MixtureSchedule m;
  std::vector<double> shares;
  uint64_t sum_sizes = 0, sum_repeats = 0;
  for (const MixtureSourceSpec& src : sources) {
    m.sizes_.push_back(src.num_samples);
    sum_sizes += src.num_samples;
    const double repeated = src.repeat * static_cast<double>(src.num_samples);
    shares.push_back(weights ? src.weight : repeated);
    sum_repeats += static_cast<uint64_t>(std::llround(repeated));
  }
  if (samples_per_epoch == 0 && !weights) {
    // Repeat factors with the default budget: each source's own rounded count.
    m.total_ = sum_repeats;
    for (const MixtureSourceSpec& src : sources) {
      m.quotas_.push_back(
          static_cast<uint64_t>(std::llround(src.repeat * static_cast<double>(src.num_samples))));
    }
  } else {
    m.total_ = samples_per_epoch != 0 ? samples_per_epoch : sum_sizes;
    m.quotas_ = Apportion(m.total_, shares);
  }
  if (m.total_ == 0) return Status::InvalidArgument("mixture: an epoch of 0 samples");
  m.offsets_.assign(1, 0);
  for (uint64_t n : m.sizes_) m.offsets_.push_back(m.offsets_.back() + n);
  const size_t count = m.sizes_.size();
  m.rest_.assign(count, 0);
  uint64_t rest = 0;
  for (size_t s = count; s-- > 0;) {
    rest += m.quotas_[s];
    m.rest_[s] = rest;
  }
  m.rest_div_.resize(count);
  m.level_64_.assign(count, 0);
  m.size_div_.resize(count);
  for (size_t s = 0; s < count; ++s) {
    const uint64_t r = m.rest_[s], c = m.quotas_[s];
    if (r > 0) m.rest_div_[s] = Divider(r);
    // x < rest and x c must not wrap: (rest - 1) c <= 2^64 - 1.
    m.level_64_[s] = r > 0 && (c == 0 || r - 1 <= ~uint64_t{0} / c) ? 1 : 0;
    m.size_div_[s] = Divider(m.sizes_[s]);
  }
  return m;
}

void MixtureSchedule::Schedule(uint64_t i, uint32_t* source, uint64_t* draw) const {
  // A chain of Bresenham splits: among the rest_[s] positions left for sources s..S-1, source s
  // takes index x when floor((x + 1) c_s / rest) > floor(x c_s / rest), as its draw floor(x c_s /
  // rest); the others move on with x - floor(x c_s / rest). With a = floor(x c / rest) and
  // r = x c - a rest, the test is r + c >= rest: one division per level.
  uint64_t x = i;
  const uint32_t last = static_cast<uint32_t>(sizes_.size() - 1);
  for (uint32_t s = 0; s < last; ++s) {
    const uint64_t c = quotas_[s];
    if (c == 0) continue;
    const uint64_t rest = rest_[s];
    uint64_t a = 0;
    bool take = false;
    if (level_64_[s]) {
      uint64_t r = 0;
      rest_div_[s].DivMod(x * c, &a, &r);
      take = r + c >= rest;  // no wrap: c = 1, or rest <= 2^63 + 1 since (rest - 1) c < 2^64
    } else {
      a = MulDiv(x, c, rest);
      take = MulDiv(x + 1, c, rest) > a;
    }
    if (take) {
      *source = s;
      *draw = a;
      return;
    }
    x -= a;
  }
  *source = last;
  *draw = x;
}

MixtureDraw MixtureSchedule::Draw(uint64_t seed, uint64_t epoch, bool shuffle,
                                  uint64_t position) const {
  uint64_t i = position;
  if (shuffle) {
    const uint64_t w = position / kMixtureWindow, begin = w * kMixtureWindow;
    const uint64_t len = std::min(kMixtureWindow, total_ - begin);
    i = begin + IndexPermutation(len, WindowKey(EpochKey(seed, epoch), w))(position - begin);
  }
  MixtureDraw d;
  uint64_t k = 0;
  Schedule(i, &d.source, &k);
  const uint64_t n = sizes_[d.source];
  const __uint128_t total_draw = static_cast<__uint128_t>(epoch) * quotas_[d.source] + k;
  const uint64_t pass = static_cast<uint64_t>(total_draw / n);
  const uint64_t j = static_cast<uint64_t>(total_draw % n);
  d.sample = shuffle ? IndexPermutation(n, PassKey(seed, d.source, pass))(j) : j;
  return d;
}

uint64_t MixtureSchedule::Index(uint64_t seed, uint64_t epoch, bool shuffle,
                                uint64_t position) const {
  const MixtureDraw d = Draw(seed, epoch, shuffle, position);
  return offsets_[d.source] + d.sample;
}

void MixtureSchedule::Apply(uint64_t seed, uint64_t epoch, bool shuffle, uint64_t* positions,
                            size_t count) const {
  // Draw() per position, restructured so that the Feistel evaluations run through
  // IndexPermutation::Apply (several values in flight) and no step divides in hardware:
  // (1) window permutation over runs of positions sharing a window, (2) the chain and the draw's
  // pass and place, (3) per source and pass, its permutation over all of the piece's draws.
  // Pieces of kPiece positions keep the scratch on the stack. A position or two (the read-ahead
  // probes) go through Index(), which builds no batch state.
  if (count <= 2) {
    for (size_t k = 0; k < count; ++k) positions[k] = Index(seed, epoch, shuffle, positions[k]);
    return;
  }
  // kTableRun: positions of one window from which tabulating its rounds (96 mixes) beats
  // evaluating them (6 mixes a position, 8 positions in flight).
  constexpr size_t kPiece = 256, kSmall = 16, kTableRun = 24;
  const size_t num_sources = sizes_.size();
  // The draw number over the run D = e c_s + k as (pass, j) = (D / n_s, D mod n_s), from
  // e c_s's own quotient and remainder, found once per source: D = e c_s + k with k < c_s.
  struct EpochBase {
    bool set = false;
    bool wide = false;  // rem + k might not fit in 64 bits: divide in 128 bits
    uint64_t pass = 0, rem = 0;
  };
  EpochBase small_bases[kSmall];
  uint32_t small_first[kSmall + 1];
  std::vector<EpochBase> big_bases;
  std::vector<uint32_t> big_first;
  if (num_sources > kSmall) {
    big_bases.resize(num_sources);
    big_first.resize(num_sources + 1);
  }
  EpochBase* bases = num_sources > kSmall ? big_bases.data() : small_bases;
  uint32_t* first = num_sources > kSmall ? big_first.data() : small_first;
  const uint64_t epoch_key = EpochKey(seed, epoch);
  uint64_t window_id = UINT64_MAX;
  IndexPermutation window;
  uint64_t place[kPiece], pass[kPiece], values[kPiece];
  uint32_t source[kPiece];
  uint16_t order[kPiece], where[kPiece];
  for (size_t piece = 0; piece < count; piece += kPiece) {
    uint64_t* out = positions + piece;
    const size_t m = std::min(kPiece, count - piece);
    for (size_t k = 0; k < m; ++k) place[k] = out[k];
    if (shuffle) {
      for (size_t k = 0; k < m;) {
        const uint64_t w = place[k] / kMixtureWindow, begin = w * kMixtureWindow;
        size_t end = k + 1;
        while (end < m && place[end] / kMixtureWindow == w) ++end;
        const uint64_t len = std::min(kMixtureWindow, total_ - begin);
        if (end - k >= kTableRun) {
          // A long run (a rank reading most of a window): tabulate the window's rounds.
          const WindowTable table(len, WindowKey(epoch_key, w));
          for (size_t q = k; q < end; ++q) place[q] = begin + table(place[q] - begin);
        } else {
          if (w != window_id) {
            window_id = w;
            window = IndexPermutation(len, WindowKey(epoch_key, w));
          }
          for (size_t q = k; q < end; ++q) place[q] -= begin;
          window.Apply(place + k, end - k);
          for (size_t q = k; q < end; ++q) place[q] += begin;
        }
        k = end;
      }
    }
    for (size_t k = 0; k < m; ++k) {
      uint32_t s = 0;
      uint64_t draw = 0;
      Schedule(place[k], &s, &draw);
      const uint64_t n = sizes_[s];
      EpochBase& base = bases[s];
      if (!base.set) {
        base.set = true;
        const __uint128_t start = static_cast<__uint128_t>(epoch) * quotas_[s];
        base.pass = static_cast<uint64_t>(start / n);
        base.rem = static_cast<uint64_t>(start % n);
        base.wide = quotas_[s] > ~uint64_t{0} - n;
      }
      uint64_t p = 0, j = 0;
      if (!base.wide) {
        size_div_[s].DivMod(base.rem + draw, &p, &j);
        p += base.pass;
      } else {
        const __uint128_t total_draw = static_cast<__uint128_t>(epoch) * quotas_[s] + draw;
        p = static_cast<uint64_t>(total_draw / n);
        j = static_cast<uint64_t>(total_draw % n);
      }
      source[k] = s;
      place[k] = j;
      pass[k] = p;
    }
    if (shuffle) {
      // Group the piece's draws by source (a counting sort), then each group by pass (a batch
      // meets one or two passes of a source, more only for a source much smaller than it).
      std::fill(first, first + num_sources + 1, 0u);
      for (size_t k = 0; k < m; ++k) ++first[source[k] + 1];
      for (size_t s = 0; s < num_sources; ++s) first[s + 1] += first[s];
      for (size_t k = 0; k < m; ++k) order[first[source[k]]++] = static_cast<uint16_t>(k);
      // first[s] is now the end of source s's group (the start of s + 1's).
      uint32_t group_begin = 0;
      for (size_t s = 0; s < num_sources; ++s) {
        const uint32_t begin = group_begin;
        uint32_t end = first[s];
        group_begin = end;
        while (begin < end) {
          // Takes the draws of the first one's pass; the rest move to the group's front.
          const uint64_t p = pass[order[begin]];
          size_t taken = 0;
          uint32_t kept = begin;
          for (uint32_t g = begin; g < end; ++g) {
            const uint16_t k = order[g];
            if (pass[k] == p) {
              values[taken] = place[k];
              where[taken++] = k;
            } else {
              order[kept++] = k;
            }
          }
          IndexPermutation(sizes_[s], PassKey(seed, static_cast<uint32_t>(s), p))
              .Apply(values, taken);
          for (size_t v = 0; v < taken; ++v) place[where[v]] = values[v];
          end = kept;  // the draws of other passes, moved to [begin, kept): go on over them
        }
      }
    }
    for (size_t k = 0; k < m; ++k) out[k] = offsets_[source[k]] + place[k];
  }
}

uint32_t MixtureSchedule::SourceOfIndex(uint64_t index) const {
  // offsets_ is non-decreasing from 0; the source is the last offset <= index (for a few
  // sources a scan, cheaper than the search, once per sample in Next()).
  const size_t count = sizes_.size();
  if (count <= 8) {
    size_t s = 0;
    while (s + 1 < count && index >= offsets_[s + 1]) ++s;
    return static_cast<uint32_t>(s);
  }
  const auto it = std::upper_bound(offsets_.begin(), offsets_.end(), index);
  return static_cast<uint32_t>(it - offsets_.begin() - 1);
}

uint64_t MixtureSchedule::Fingerprint() const {
  uint64_t h = SplitMix64Mix(kMixtureOrderVersion + kGolden);
  h = SplitMix64Mix(h ^ total_);
  for (size_t s = 0; s < sizes_.size(); ++s) {
    h = SplitMix64Mix(h ^ sizes_[s]);
    h = SplitMix64Mix(h ^ quotas_[s]);
  }
  return h;
}

}  // namespace kiln
