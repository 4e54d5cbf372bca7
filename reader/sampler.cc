#include "reader/sampler.h"

#include <algorithm>

namespace kiln {

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
// Domain-separation tags of the kBlock keys (ASCII "BlockOrd", "TailBlk!", "WindowSh").
constexpr uint64_t kBlockOrderTag = 0x426C6F636B4F7264ull;
constexpr uint64_t kTailSlotTag = 0x5461696C426C6B21ull;
constexpr uint64_t kWindowTag = 0x57696E646F775368ull;
constexpr uint32_t kMaxWindowBlocks = 1u << 20;

uint64_t MulHigh(uint64_t a, uint64_t b) {
  return static_cast<uint64_t>((static_cast<__uint128_t>(a) * b) >> 64);
}

}  // namespace

const char* ShuffleModeName(ShuffleMode mode) {
  switch (mode) {
    case ShuffleMode::kNone:
      return "none";
    case ShuffleMode::kExact:
      return "exact";
    case ShuffleMode::kBlock:
      return "block";
  }
  return "unknown";
}

Result<ShuffleMode> ParseShuffleMode(const std::string& name) {
  if (name == "none") return ShuffleMode::kNone;
  if (name == "exact") return ShuffleMode::kExact;
  if (name == "block") return ShuffleMode::kBlock;
  return Status::InvalidArgument("shuffle mode '" + name +
                                 "' is not one of 'none', 'exact', 'block'");
}

const char* TailPolicyName(TailPolicy tail) {
  switch (tail) {
    case TailPolicy::kShort:
      return "short";
    case TailPolicy::kDrop:
      return "drop";
    case TailPolicy::kPad:
      return "pad";
  }
  return "unknown";
}

Result<TailPolicy> ParseTailPolicy(const std::string& name) {
  if (name == "short") return TailPolicy::kShort;
  if (name == "drop") return TailPolicy::kDrop;
  if (name == "pad") return TailPolicy::kPad;
  return Status::InvalidArgument("tail '" + name + "' must be short, drop or pad");
}

IndexPermutation::IndexPermutation(uint64_t n, uint64_t key) : n_(n) {
  if (n <= 1) return;
  uint32_t bits = 64 - static_cast<uint32_t>(__builtin_clzll(n - 1));  // ceil(log2 n)
  bits = std::max<uint32_t>(bits, 2);
  right_bits_ = bits / 2;
  left_bits_ = bits - right_bits_;
  mask_ = (uint64_t{1} << right_bits_) - 1;
  for (int i = 0; i < kFeistelRounds; ++i) {
    keys_[i] = SplitMix64Mix(key + static_cast<uint64_t>(i + 1) * kGolden);
  }
}

void IndexPermutation::Apply(uint64_t* values, size_t count) const {
  if (n_ <= 1) return;
  // kLanes values in flight; a lane whose value landed in [0, n) is written out and refilled
  // with the next input, so cycle walking never stalls the other lanes.
  constexpr size_t kLanes = 8;
  const uint32_t right = right_bits_, shift_l = 64 - left_bits_, shift_r = 64 - right_bits_;
  const uint64_t mask = mask_;
  uint64_t keys[kFeistelRounds];
  for (int i = 0; i < kFeistelRounds; ++i) keys[i] = keys_[i];
  uint64_t l[kLanes] = {}, r[kLanes] = {};
  size_t slot[kLanes];
  size_t active = 0, next = 0;
  while (active < kLanes && next < count) {
    l[active] = values[next] >> right;
    r[active] = values[next] & mask;
    slot[active++] = next++;
  }
  while (active > 0) {
    // Rounds outside, lanes inside: kLanes independent dependency chains per round.
#pragma GCC unroll 4
    for (int i = 0; i < kFeistelRounds; i += 2) {
#pragma GCC unroll 8
      for (size_t k = 0; k < kLanes; ++k) {
        l[k] ^= SplitMix64Mix(r[k] ^ keys[i]) >> shift_l;
        r[k] ^= SplitMix64Mix(l[k] ^ keys[i + 1]) >> shift_r;
      }
    }
    for (size_t k = 0; k < active;) {
      const uint64_t y = (l[k] << right) | r[k];
      if (y >= n_) {  // walk on: encrypt y again (its halves are already in place)
        ++k;
        continue;
      }
      values[slot[k]] = y;
      if (next < count) {
        l[k] = values[next] >> right;
        r[k] = values[next] & mask;
        slot[k] = next++;
        ++k;
      } else {  // no input left: move the last active lane here
        --active;
        l[k] = l[active];
        r[k] = r[active];
        slot[k] = slot[active];
      }
    }
  }
}

uint64_t IndexPermutation::Inverse(uint64_t y) const {
  if (n_ <= 1) return y;
  do {
    uint64_t l = y >> right_bits_, r = y & mask_;
    for (int i = kFeistelRounds - 2; i >= 0; i -= 2) {
      r ^= SplitMix64Mix(l ^ keys_[i + 1]) >> (64 - right_bits_);
      l ^= SplitMix64Mix(r ^ keys_[i]) >> (64 - left_bits_);
    }
    y = (l << right_bits_) | r;
  } while (y >= n_);
  return y;
}

Result<Sampler> Sampler::Create(const SamplerOptions& options) {
  if (options.batch_size == 0) return Status::InvalidArgument("batch size must be at least 1");
  if (options.world_size == 0) return Status::InvalidArgument("world size must be at least 1");
  if (options.rank >= options.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) +
                                   " must be below world size " +
                                   std::to_string(options.world_size));
  }
  if (options.shuffle == ShuffleMode::kBlock) {
    if (options.block_samples == 0) {
      return Status::InvalidArgument("block shuffle: block_samples must be at least 1");
    }
    if (options.window_blocks == 0 || options.window_blocks > kMaxWindowBlocks) {
      return Status::InvalidArgument("block shuffle: shuffle window of " +
                                     std::to_string(options.window_blocks) +
                                     " blocks must be in [1, 1048576]");
    }
  }
  if (options.mixture != nullptr) {
    if (options.shuffle == ShuffleMode::kBlock) {
      return Status::InvalidArgument(
          "a mixture of datasets reads in exact or none order, not block order");
    }
    if (options.num_samples != options.mixture->samples_per_epoch()) {
      return Status::InvalidArgument("mixture: num_samples " + std::to_string(options.num_samples) +
                                     " differs from samples_per_epoch " +
                                     std::to_string(options.mixture->samples_per_epoch()));
    }
  }
  Sampler sampler(options);
  sampler.SetEpoch(0);
  return sampler;
}

Sampler::Sampler(const SamplerOptions& options) : options_(options) {
  const uint64_t n = options.num_samples, w = options.world_size, b = options.batch_size;
  if (options.shuffle == ShuffleMode::kBlock) {
    // Blocks larger than N / (16 W) would leave some ranks with few or no blocks (and empty or
    // all-padding batches): cap them so every rank is dealt at least kMinBlocksPerRank blocks.
    const uint64_t cap = std::max<uint64_t>(1, n / (kMinBlocksPerRank * w));
    block_samples_ = std::clamp<uint64_t>(options.block_samples, 1, cap);
    full_blocks_ = n / block_samples_;
    tail_samples_ = n % block_samples_;
    own_full_blocks_ = full_blocks_ > options.rank ? (full_blocks_ - options.rank + w - 1) / w : 0;
    has_tail_ = tail_samples_ > 0 && options.rank == full_blocks_ % w;
    list_blocks_ = own_full_blocks_ + (has_tail_ ? 1 : 0);
    own_real_ = OwnShare(options.rank);
  } else {
    own_real_ = OwnShare(options.rank);
  }
  const uint64_t max_share = OwnShare(0), min_share = OwnShare(options.world_size - 1);
  switch (options.tail) {
    case TailPolicy::kShort:
      share_ = own_real_;
      // Steps follow the largest share, or the smallest when partial batches are dropped, so
      // that every rank runs the same number.
      batches_ = options.drop_last ? min_share / b : (max_share + b - 1) / b;
      break;
    case TailPolicy::kDrop:
      share_ = min_share;
      batches_ = options.drop_last ? min_share / b : (min_share + b - 1) / b;
      break;
    case TailPolicy::kPad:
      share_ = n == 0 ? 0 : max_share;
      batches_ = options.drop_last ? share_ / b : (share_ + b - 1) / b;
      break;
  }
}

uint64_t Sampler::OwnShare(uint32_t rank) const {
  const uint64_t w = options_.world_size;
  if (options_.shuffle != ShuffleMode::kBlock) {
    const uint64_t n = options_.num_samples;
    return n > rank ? (n - rank + w - 1) / w : 0;
  }
  const uint64_t blocks = full_blocks_ > rank ? (full_blocks_ - rank + w - 1) / w : 0;
  const bool tail = tail_samples_ > 0 && rank == full_blocks_ % w;
  return blocks * block_samples_ + (tail ? tail_samples_ : 0);
}

Status Sampler::SetEpoch(uint64_t epoch, uint64_t consumed) {
  const uint64_t n = options_.num_samples, w = options_.world_size, b = options_.batch_size;
  const uint64_t step = b * w;
  if (options_.shuffle == ShuffleMode::kBlock) {
    if (consumed % step != 0) {
      return Status::InvalidArgument(
          "block shuffle: cannot resume after " + std::to_string(consumed) +
          " samples: not a whole number of steps of batch size " + std::to_string(b) +
          " x world size " + std::to_string(w) +
          " (a block-order state restores mid-epoch only with the batch size and world size "
          "it was saved with)");
    }
    if (consumed / step > batches_) {
      return Status::OutOfRange("block shuffle: cannot resume after step " +
                                std::to_string(consumed / step) + ": the epoch has only " +
                                std::to_string(batches_) + " steps");
    }
  } else if (consumed > n) {
    return Status::OutOfRange("cannot resume after " + std::to_string(consumed) +
                              " samples: past the end of the epoch (" + std::to_string(n) +
                              " samples)");
  }
  epoch_ = epoch;
  epoch_key_ = SplitMix64Mix(options_.seed ^ SplitMix64Mix(epoch + kGolden));
  start_consumed_ = consumed;
  first_step_ = consumed / step;
  switch (options_.shuffle) {
    case ShuffleMode::kNone:
      permutation_ = IndexPermutation();
      break;
    case ShuffleMode::kExact:
      // A mixture maps positions through its own schedule (reader/mixture.h).
      permutation_ = options_.mixture ? IndexPermutation() : IndexPermutation(n, epoch_key_);
      break;
    case ShuffleMode::kBlock:
      permutation_ = IndexPermutation(full_blocks_, SplitMix64Mix(epoch_key_ ^ kBlockOrderTag));
      tail_slot_ =
          has_tail_ ? MulHigh(SplitMix64Mix(epoch_key_ ^ kTailSlotTag), own_full_blocks_ + 1) : 0;
      break;
  }
  if (options_.shuffle == ShuffleMode::kBlock) {
    segment_start_ = first_step_ * b;
    segment_share_ = share_ > segment_start_ ? share_ - segment_start_ : 0;
    segment_batches_ = batches_ - first_step_;
    return Status::Ok();
  }
  segment_start_ = 0;
  if (consumed == 0) {
    segment_share_ = share_;
    segment_batches_ = batches_;
    return Status::Ok();
  }
  // The remaining positions [consumed, N) split over this sampler's ranks by the same rule.
  const uint64_t rest = n - consumed, r = options_.rank;
  const uint64_t own = rest > r ? (rest - r + w - 1) / w : 0;
  const uint64_t floor_share = rest / w, ceil_share = (rest + w - 1) / w;
  switch (options_.tail) {
    case TailPolicy::kShort:
      segment_share_ = own;
      segment_batches_ = options_.drop_last ? floor_share / b : (ceil_share + b - 1) / b;
      break;
    case TailPolicy::kDrop:
      segment_share_ = floor_share;
      segment_batches_ = options_.drop_last ? floor_share / b : (floor_share + b - 1) / b;
      break;
    case TailPolicy::kPad:
      segment_share_ = ceil_share;
      segment_batches_ = options_.drop_last ? ceil_share / b : (ceil_share + b - 1) / b;
      break;
  }
  return Status::Ok();
}

uint64_t Sampler::samples_per_epoch() const {
  return std::min(share_, batches_ * options_.batch_size);
}

uint64_t Sampler::ConsumedAfter(uint64_t batches) const {
  const uint64_t c =
      start_consumed_ + batches * options_.batch_size * uint64_t{options_.world_size};
  return options_.shuffle == ShuffleMode::kBlock ? c : std::min(c, options_.num_samples);
}

uint32_t Sampler::BatchSize(uint64_t b) const {
  const uint64_t begin = b * options_.batch_size;
  if (begin >= segment_share_) return 0;
  return static_cast<uint32_t>(std::min<uint64_t>(options_.batch_size, segment_share_ - begin));
}

uint64_t Sampler::PositionToIndex(uint64_t position) const {
  switch (options_.shuffle) {
    case ShuffleMode::kNone:
    case ShuffleMode::kExact:
      if (options_.mixture) {
        return options_.mixture->Index(options_.seed, epoch_,
                                       options_.shuffle == ShuffleMode::kExact, position);
      }
      return options_.shuffle == ShuffleMode::kExact ? permutation_(position) : position;
    case ShuffleMode::kBlock:
      return BlockSequenceIndex(
          position, WindowPermutation(BlockOfPosition(position) / options_.window_blocks));
  }
  return position;
}

uint64_t Sampler::BlockStart(uint64_t j) const {
  if (!has_tail_ || j <= tail_slot_) return j * block_samples_;
  return (j - 1) * block_samples_ + tail_samples_;
}

uint64_t Sampler::BlockOfPosition(uint64_t p) const {
  const uint64_t tail_start = tail_slot_ * block_samples_;
  if (!has_tail_ || p < tail_start) return p / block_samples_;
  if (p < tail_start + tail_samples_) return tail_slot_;
  return tail_slot_ + 1 + (p - tail_start - tail_samples_) / block_samples_;
}

SampleRange Sampler::RankBlock(uint64_t j) const {
  if (has_tail_ && j == tail_slot_) return {full_blocks_ * block_samples_, tail_samples_};
  const uint64_t dealt = (has_tail_ && j > tail_slot_) ? j - 1 : j;
  const uint64_t q = permutation_(options_.rank + dealt * options_.world_size);
  return {q * block_samples_, block_samples_};
}

IndexPermutation Sampler::WindowPermutation(uint64_t w) const {
  const uint64_t g = options_.window_blocks;
  const uint64_t begin = BlockStart(w * g);
  const uint64_t end = BlockStart(std::min(list_blocks_, (w + 1) * g));
  const uint64_t key =
      SplitMix64Mix(SplitMix64Mix(SplitMix64Mix(epoch_key_ ^ kWindowTag) + options_.rank) + w);
  return IndexPermutation(end - begin, key);
}

uint64_t Sampler::BlockSequenceIndex(uint64_t p, const IndexPermutation& window) const {
  const uint64_t w = BlockOfPosition(p) / options_.window_blocks;
  const uint64_t begin = BlockStart(w * options_.window_blocks);
  const uint64_t q = begin + window(p - begin);
  const uint64_t j = BlockOfPosition(q);
  return RankBlock(j).begin + (q - BlockStart(j));
}

void Sampler::BatchBlocks(uint64_t b, uint64_t* first, uint64_t* end) const {
  *first = *end = 0;
  if (options_.shuffle != ShuffleMode::kBlock) return;
  const uint64_t p0 = segment_start_ + b * options_.batch_size;
  const uint64_t p1 = std::min(p0 + BatchSize(b), own_real_);
  if (p0 >= p1) return;
  const uint64_t g = options_.window_blocks;
  *first = BlockOfPosition(p0) / g * g;
  *end = std::min(list_blocks_, (BlockOfPosition(p1 - 1) / g + 1) * g);
}

void Sampler::BatchSamples(uint64_t b, uint32_t begin, uint32_t end, uint64_t* indices,
                           uint8_t* is_padding) const {
  const uint64_t n = options_.num_samples, w = options_.world_size;
  if (options_.shuffle != ShuffleMode::kBlock) {
    for (uint32_t k = begin; k < end; ++k) {
      const uint64_t position = start_consumed_ + (b * options_.batch_size + k) * w + options_.rank;
      const bool pad = position >= n;  // only reachable under kPad
      indices[k - begin] = pad ? position % n : position;
      is_padding[k - begin] = pad ? 1 : 0;
    }
    if (options_.mixture) {
      options_.mixture->Apply(options_.seed, epoch_, options_.shuffle == ShuffleMode::kExact,
                              indices, end - begin);
    } else if (options_.shuffle == ShuffleMode::kExact) {
      permutation_.Apply(indices, end - begin);
    }
    return;
  }
  // Consecutive positions share a window: build its permutation once per window.
  uint64_t window_id = UINT64_MAX;
  IndexPermutation window;
  for (uint32_t k = begin; k < end; ++k) {
    uint64_t p = segment_start_ + b * options_.batch_size + k;
    const bool pad = p >= own_real_;  // only reachable under kPad
    is_padding[k - begin] = pad ? 1 : 0;
    if (pad && own_real_ == 0) {
      indices[k - begin] = p % n;
      continue;
    }
    if (pad) p %= own_real_;
    const uint64_t w_id = BlockOfPosition(p) / options_.window_blocks;
    if (w_id != window_id) {
      window_id = w_id;
      window = WindowPermutation(w_id);
    }
    indices[k - begin] = BlockSequenceIndex(p, window);
  }
}

}  // namespace kiln
