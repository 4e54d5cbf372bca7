#include "reader/sampler.h"

#include <algorithm>
#include <numeric>

namespace kiln {

uint64_t SplitMix64Mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

namespace {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return SplitMix64Mix(state_ += 0x9E3779B97F4A7C15ull); }
  // Lemire's method: an unbiased integer in [0, range).
  uint64_t Below(uint64_t range) {
    __uint128_t m = static_cast<__uint128_t>(Next()) * range;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < range) {
      const uint64_t threshold = (0 - range) % range;
      while (low < threshold) {
        m = static_cast<__uint128_t>(Next()) * range;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace

Result<Sampler> Sampler::Create(const SamplerOptions& options) {
  if (options.batch_size == 0) return Status::InvalidArgument("batch size must be at least 1");
  if (options.world_size == 0) return Status::InvalidArgument("world size must be at least 1");
  if (options.rank >= options.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) +
                                   " must be below world size " +
                                   std::to_string(options.world_size));
  }
  Sampler sampler(options);
  sampler.SetEpoch(0);
  return sampler;
}

Sampler::Sampler(const SamplerOptions& options) : options_(options) {
  const uint64_t n = options.num_samples, w = options.world_size, b = options.batch_size;
  const uint64_t floor_share = n / w, ceil_share = (n + w - 1) / w;
  const uint64_t own_share = (n > options.rank) ? (n - options.rank + w - 1) / w : 0;
  switch (options.tail) {
    case TailPolicy::kShort:
      share_ = own_share;
      // Steps follow the largest share, or the smallest when partial batches are dropped, so
      // that every rank runs the same number.
      batches_ = options.drop_last ? floor_share / b : (ceil_share + b - 1) / b;
      break;
    case TailPolicy::kDrop:
      share_ = floor_share;
      batches_ = options.drop_last ? floor_share / b : (floor_share + b - 1) / b;
      break;
    case TailPolicy::kPad:
      share_ = n == 0 ? 0 : ceil_share;
      batches_ = options.drop_last ? share_ / b : (share_ + b - 1) / b;
      break;
  }
}

void Sampler::SetEpoch(uint64_t epoch) {
  epoch_ = epoch;
  permutation_.resize(options_.num_samples);
  std::iota(permutation_.begin(), permutation_.end(), uint64_t{0});
  if (!options_.shuffle || permutation_.size() < 2) return;
  SplitMix64 rng(SplitMix64Mix(options_.seed ^ SplitMix64Mix(epoch + 0x9E3779B97F4A7C15ull)));
  for (uint64_t i = permutation_.size() - 1; i > 0; --i) {
    std::swap(permutation_[i], permutation_[rng.Below(i + 1)]);
  }
}

uint64_t Sampler::samples_per_epoch() const {
  return std::min(share_, batches_ * options_.batch_size);
}

uint32_t Sampler::BatchSize(uint64_t b) const {
  const uint64_t begin = b * options_.batch_size;
  if (begin >= share_) return 0;
  return static_cast<uint32_t>(std::min<uint64_t>(options_.batch_size, share_ - begin));
}

void Sampler::BatchSamples(uint64_t b, uint32_t begin, uint32_t end, uint64_t* indices,
                           uint8_t* is_padding) const {
  const uint64_t n = options_.num_samples, w = options_.world_size;
  for (uint32_t k = begin; k < end; ++k) {
    const uint64_t position = (b * options_.batch_size + k) * w + options_.rank;
    const bool pad = position >= n;  // only reachable under kPad
    indices[k - begin] = permutation_[pad ? position % n : position];
    is_padding[k - begin] = pad ? 1 : 0;
  }
}

}  // namespace kiln
