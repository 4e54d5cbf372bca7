// kiln::MixtureSchedule: the order of a mixture of several datasets (sources), as a pure function
// of (seed, epoch, global position) in O(number of sources) time and memory per position: no
// materialised index of the mixture. reader/mixture.md holds the design, the formulas and the
// rationale; this header keeps the contract.
//
// A mixture has S sources, source s with n_s samples and a weight (its proportion of the samples
// drawn) or a repeat factor (samples drawn per epoch = repeat x n_s), and an epoch of N samples
// (samples_per_epoch). Each epoch draws exactly c_s samples of source s (the quotas, sum N).
// Global position p of epoch e maps to (source s, the k-th draw of s in the epoch) by a
// windowed low-discrepancy schedule; the draw's number over the whole run D = e c_s + k maps to
// sample Perm(n_s, key(seed, s, pass))(D mod n_s) of pass D / n_s: every pass over a source
// reads each of its samples exactly once, a source smaller than its share is repeated with a
// fresh permutation on each pass, a larger one is subsampled without repetition and a later
// epoch continues with samples not yet seen. The Sampler (reader/sampler.h) splits the N
// positions over ranks, batches and tail policies as it does a dataset's N samples in exact
// order, so resuming (also on another world size) works unchanged.
//
// Indices: a mixture's sample index is an index into the concatenation of its sources (source
// s's sample j is offset(s) + j), the index space of MixtureDataset (reader/mixture_dataset.h).
//
// Thread safety: a plain value after Create; const methods are safe from many threads.
#ifndef KILN_READER_MIXTURE_H_
#define KILN_READER_MIXTURE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"

namespace kiln {

// The version of the mixture order this header specifies; a saved state records it through the
// sampler order version (kSamplerOrderVersion) and the mixture section of the reader state.
inline constexpr uint32_t kMixtureOrderVersion = 1;
// Positions per schedule window (reader/mixture.md, "Schedule"): the quotas hold within every
// aligned window of this many global positions, up to one sample per source.
inline constexpr uint64_t kMixtureWindow = 256;
// The most sources a mixture takes.
inline constexpr size_t kMaxMixtureSources = 1024;

// How much of one source an epoch draws. Exactly one of weight and repeat is set (> 0), and
// every source of a mixture uses the same one.
struct MixtureSourceSpec {
  uint64_t num_samples = 0;  // n_s, >= 1
  // Proportion of the epoch's samples (normalised over the sources), > 0 and finite. Default 0.
  double weight = 0;
  // Samples drawn per epoch = repeat x n_s (rounded to nearest), > 0 and finite: 1 reads the
  // source once per epoch, 3 upsamples it 3x, 0.5 reads half of it. Default 0.
  double repeat = 0;
  std::string name;  // for messages (the dataset's directory)
};

// One source's draw at a global position: the source and its dataset sample.
struct MixtureDraw {
  uint32_t source = 0;
  uint64_t sample = 0;  // index within the source, < n_s
};

class MixtureSchedule {
 public:
  MixtureSchedule() = default;
  // Computes the quotas. samples_per_epoch 0 means the default: the sum of the sources' sizes
  // with weights (one pass over the total, split by weight), sum of round(repeat x n_s) with
  // repeats. With weights the quotas are the largest-remainder apportionment of N (ties to the
  // lower source); with repeats and an explicit N, the apportionment of N in proportion to
  // repeat x n_s. Errors: InvalidArgument for no sources or more than kMaxMixtureSources, a
  // source with 0 samples, a weight or repeat that is not > 0 and finite, both or neither set,
  // sources mixing weights and repeats (each naming the source), or a total of 0 samples.
  static Result<MixtureSchedule> Create(const std::vector<MixtureSourceSpec>& sources,
                                        uint64_t samples_per_epoch);

  size_t num_sources() const { return sizes_.size(); }
  uint64_t samples_per_epoch() const { return total_; }              // N
  uint64_t source_samples(size_t s) const { return sizes_[s]; }      // n_s
  uint64_t quota(size_t s) const { return quotas_[s]; }              // c_s: draws per epoch
  uint64_t offset(size_t s) const { return offsets_[s]; }            // first concatenated index
  uint64_t concatenated_samples() const { return offsets_.back(); }  // sum of n_s

  // Returns the source and sample at global position `position` (< N) of `epoch`. `shuffle`
  // false (ShuffleMode::kNone) uses no window permutation and reads each pass in dataset order.
  // O(S).
  MixtureDraw Draw(uint64_t seed, uint64_t epoch, bool shuffle, uint64_t position) const;
  // Draw() as a concatenated index: offset(source) + sample.
  uint64_t Index(uint64_t seed, uint64_t epoch, bool shuffle, uint64_t position) const;
  // Replaces each of positions[0, count) (each < N) by its concatenated index, as Index would,
  // reusing the window and pass permutations between neighbouring positions.
  void Apply(uint64_t seed, uint64_t epoch, bool shuffle, uint64_t* positions, size_t count) const;

  // The schedule without the window permutation: the source and its within-epoch draw number
  // k (< c_s) of schedule index i (< N). A bijection [0, N) -> {(s, k) : k < c_s}.
  void Schedule(uint64_t i, uint32_t* source, uint64_t* draw) const;
  // The source a concatenated index belongs to (a scan of the offsets, a binary search past 8).
  uint32_t SourceOfIndex(uint64_t index) const;

  // XXH3-free fingerprint of the quotas and sizes (SplitMix64 chain), for the reader state.
  uint64_t Fingerprint() const;

  // Exact floor division of 64-bit numerators by a fixed divisor d >= 1 through a precomputed
  // reciprocal floor((2^64 - 1) / d): one multiply-high and at most one correction, in place of
  // a hardware divide (which the schedule would pay several times per position). Public for
  // its test (MixtureScheduleTest.DividerIsExactAtTheEdges); a plain value, thread-safe.
  struct Divider {
    uint64_t d = 1;
    uint64_t reciprocal = ~uint64_t{0};
    Divider() = default;
    explicit Divider(uint64_t divisor) : d(divisor), reciprocal(~uint64_t{0} / divisor) {}
    // Sets *quotient = num / d and *remainder = num % d.
    void DivMod(uint64_t num, uint64_t* quotient, uint64_t* remainder) const {
      uint64_t q = static_cast<uint64_t>((static_cast<__uint128_t>(num) * reciprocal) >> 64);
      uint64_t r = num - q * d;  // q <= num / d <= q + 1 (reader/mixture.md, "Cost")
      if (r >= d) {
        ++q;
        r -= d;
      }
      *quotient = q;
      *remainder = r;
    }
  };

 private:
  std::vector<uint64_t> sizes_;    // n_s
  std::vector<uint64_t> quotas_;   // c_s
  std::vector<uint64_t> offsets_;  // S + 1 prefix sums of n_s
  std::vector<uint64_t> rest_;     // S: sum of c_t for t >= s (the chain's remaining positions)
  std::vector<Divider> rest_div_;  // S: division by rest_[s]
  // S: (rest_[s] - 1) c_s fits in 64 bits, so level s of the chain divides in 64 bits.
  std::vector<uint8_t> level_64_;
  std::vector<Divider> size_div_;  // S: division by n_s
  uint64_t total_ = 0;             // N
};

}  // namespace kiln

#endif  // KILN_READER_MIXTURE_H_
