// kiln::Sampler: which samples, in which order, each rank reads in each epoch.
//
// The order of an epoch depends only on (seed, epoch): one global permutation of [0, N), the
// same on every rank and every run. With shuffle off the permutation is the identity. Rank r
// takes the permutation's positions r, r + W, r + 2W, ... (W = world size): ranks split samples,
// not files. Batches are consecutive runs of batch_size samples of a rank's share.
//
// The permutation, specified so other implementations can reproduce it: a Fisher-Yates
// shuffle (Durstenfeld's variant, from the last position down) whose random integers in [0, i]
// come from Lemire's unbiased multiply-and-reject method ("Fast Random Integer Generation in an
// Interval", ACM TOMACS 2019) over SplitMix64 (Steele, Lea, Flood, OOPSLA 2014) seeded with
// SplitMix64Mix(seed ^ SplitMix64Mix(epoch + 0x9E3779B97F4A7C15)). It is written out here rather
// than taken from <random> because std::shuffle's output differs between standard libraries.
//
// Thread safety: SetEpoch must not run concurrently with anything; the const methods are safe
// from many threads at once between SetEpoch calls.
#ifndef KILN_READER_SAMPLER_H_
#define KILN_READER_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "formats/status.h"

namespace kiln {

// What happens to the N mod W samples that do not split evenly over W ranks. Every policy gives
// every rank the same number of batches per epoch, so collectives never hang (field case B34).
enum class TailPolicy {
  // Each rank keeps its own share: ceil(N/W) samples on ranks r < N mod W, floor(N/W) on the
  // others. Every rank runs the same number of steps, that of the largest share; a rank whose
  // share runs out first gets a short, possibly empty (size 0), last batch. No sample is dropped
  // or repeated. The default.
  kShort,
  // Every rank takes floor(N/W) samples; the N mod W samples at the end of the epoch's
  // permutation are skipped (different ones each epoch when shuffling).
  kDrop,
  // Every rank takes ceil(N/W) samples; the missing positions repeat samples from the start of
  // the permutation (as PyTorch's DistributedSampler does) and are flagged as padding.
  kPad,
};

struct SamplerOptions {
  uint64_t num_samples = 0;   // N, the dataset's samples
  uint32_t batch_size = 1;    // >= 1
  bool shuffle = true;        // Default true.
  uint64_t seed = 0;          // Default 0.
  bool drop_last = false;     // drop each rank's last partial batch. Default false.
  TailPolicy tail = TailPolicy::kShort;
  uint32_t rank = 0;          // in [0, world_size)
  uint32_t world_size = 1;    // >= 1
};

// SplitMix64's output mixing function: a bijection of uint64 with good avalanche.
uint64_t SplitMix64Mix(uint64_t x);

class Sampler {
 public:
  // Errors: InvalidArgument for batch_size 0, world_size 0, rank >= world_size.
  static Result<Sampler> Create(const SamplerOptions& options);

  // Computes epoch `epoch`'s permutation: O(N) time, 8N bytes.
  void SetEpoch(uint64_t epoch);
  uint64_t epoch() const { return epoch_; }

  // Samples this rank reads per epoch, padding included.
  uint64_t samples_per_epoch() const;
  // Batches (steps) per epoch: the same on every rank. Known before the epoch starts.
  uint64_t batches_per_epoch() const { return batches_; }
  // Samples in batch `b` (< batches_per_epoch()): batch_size except for a last partial batch.
  uint32_t BatchSize(uint64_t b) const;
  // Writes the dataset indices of samples [begin, end) of batch `b` (positions inside the batch)
  // to `indices`, and 1 for padded positions (kPad only) else 0 to `is_padding`.
  void BatchSamples(uint64_t b, uint32_t begin, uint32_t end, uint64_t* indices,
                    uint8_t* is_padding) const;
  // Returns the global permutation of the current epoch.
  const std::vector<uint64_t>& permutation() const { return permutation_; }

  const SamplerOptions& options() const { return options_; }

 private:
  explicit Sampler(const SamplerOptions& options);

  SamplerOptions options_;
  uint64_t share_ = 0;    // samples this rank reads, padding included
  uint64_t batches_ = 0;
  uint64_t epoch_ = 0;
  std::vector<uint64_t> permutation_;
};

}  // namespace kiln

#endif  // KILN_READER_SAMPLER_H_
