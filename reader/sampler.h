// kiln::Sampler: which samples, in which order, each rank reads in each epoch.
//
// Two read orders (ShuffleMode), both computed per position in O(1) time and memory: nothing of
// size N is ever materialised, so memory and set-up time do not grow with the dataset.
//
//   kExact (the default): one global permutation P_e of [0, N) per epoch e, the same on every
//     rank. Rank r takes the permutation's positions r, r + W, r + 2W, ... (W = world size):
//     ranks split samples, not files. Best for data in the page cache or on fast NVMe.
//   kBlock: the epoch is a permutation of blocks (runs of block_samples consecutive samples),
//     dealt to ranks; each rank shuffles its own samples within windows of window_blocks of its
//     blocks. Each rank reads mostly sequential runs and touches only its own blocks, so on W
//     ranks each node's page cache needs about 1/W of the data. Best for data larger than memory.
//   kNone: the identity order, split as kExact.
//
// Batches are consecutive runs of batch_size samples of a rank's share (its sequence).
//
// ---------------------------------------------------------------------------------------------
// The order, specified so that other implementations can reproduce it (order version
// kSamplerOrderVersion = 2; version 1, kiln before it, drew a materialised Fisher-Yates shuffle,
// so every (seed, epoch) pair now gives another order than version 1 did).
//
// All arithmetic is on uint64 modulo 2^64. Mix(x) is SplitMix64's output function (Steele, Lea,
// Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014):
//   x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9; x = (x ^ (x >> 27)) * 0x94D049BB133111EB;
//   return x ^ (x >> 31).
// G = 0x9E3779B97F4A7C15 (the golden-ratio increment of SplitMix64).
//
// Epoch key:   K_e = Mix(seed ^ Mix(epoch + G)).
//
// Keyed bijection Perm(n, key) of [0, n) ("IndexPermutation"): a Feistel network (Luby and
// Rackoff, "How to construct pseudorandom permutations from pseudorandom functions", SIAM J.
// Computing 17(2), 1988) on k bits, in the alternating form that allows halves of unequal size
// (FFX's "method 2": Bellare, Rogaway, Spies, "The FFX mode of operation for format-preserving
// encryption", 2010), restricted to [0, n) by cycle walking (Black and Rogaway, "Ciphers with
// Arbitrary Finite Domains", CT-RSA 2002, section 3):
//   - n <= 1: the identity.
//   - k = the smallest number >= 2 with 2^k >= n; b = floor(k / 2) bits on the right, a = k - b
//     on the left; maskb = 2^b - 1.
//   - Round keys k_i = Mix(key + (i + 1) * G) for i = 0 .. kFeistelRounds - 1 (6 rounds. Luby
//     and Rackoff's 4 rounds suffice for a strong pseudorandom permutation only while far fewer
//     than 2^(k/2) values are queried; a shuffle queries the whole domain, where more rounds
//     keep the structure hidden. Measured: with 4 rounds the rank x bucket chi-square of
//     tests/reader/sampler_test.cc averaged 677 over 30 epochs for 693 degrees of freedom, 2.3
//     standard errors low; with 5 and 6 rounds 695 and 690).
//   - Encrypt(x): L = x >> b, R = x & maskb; for i = 0 .. 5: for even i,
//     L = L ^ (Mix(R ^ k_i) >> (64 - a)); for odd i, R = R ^ (Mix(L ^ k_i) >> (64 - b));
//     returns (L << b) | R. (For even k this is the classic balanced Feistel network.)
//   - Perm(x) for x < n: y = Encrypt(x); while y >= n: y = Encrypt(y); returns y. Cycle walking
//     stays on x's cycle of the k-bit permutation, so it is a bijection of [0, n); 2^k < 2n, so
//     it takes fewer than 2 Encrypts on average. The inverse undoes the rounds from i = 5 down
//     to 0 (the same xors), with the same walk.
//
// kExact / kNone. Position p of epoch e holds sample Perm(N, K_e)(p) (kExact) or p (kNone).
//
// kBlock. With S = block_samples clamped to [1, max(1, floor(N / (16 W)))] (so that every rank
// is dealt at least kMinBlocksPerRank = 16 blocks whenever N >= 16 W, and rank shares differ by
// at most one block: a block larger than N / W would leave ranks with no samples) and
// G_w = window_blocks:
//   - Full blocks: M = floor(N / S); block q holds samples [q S, q S + S). The tail run
//     T = N mod S samples [M S, N), when T > 0, is the tail block.
//   - Block order: Q = Perm(M, Mix(K_e ^ 0x426C6F636B4F7264)). Rank r is dealt the full blocks
//     Q(r), Q(r + W), Q(r + 2W), ... in that order: m_r = ceil((M - r) / W) blocks (0 if r >= M).
//   - The tail block goes to rank t = M mod W, inserted in its list before dealt block
//     j_t = floor(Mix(K_e ^ 0x5461696C426C6B21) * (m_t + 1) / 2^64) (multiply-high), so its list
//     has m_t + 1 blocks and the tail is dealt block j_t. Which rank gets the tail is fixed, so
//     every rank's share of samples is the same every epoch.
//   - Rank r's sequence is the concatenation of its dealt blocks' samples, in dealt order, then
//     shuffled within windows: window w holds dealt blocks [w G_w, (w + 1) G_w) (the last window
//     fewer), i.e. sequence positions [a, a + len); the sample at sequence position a + o is the
//     one the concatenation holds at a + Perm(len, Mix(Mix(Mix(K_e ^ 0x57696E646F775368) + r) +
//     w))(o).
//   Rank r's share (the length of its sequence) is m_r S, plus T when r = t.
//
// Rank shares and the tail policy. In kExact / kNone rank r's own positions are r + jW (j = 0,
// 1, ...) below N, so its share is ceil((N - r) / W); in kBlock its sequence above. The tail
// policy (below) fixes how many samples each rank reads so that every rank runs the same number
// of steps. Padding (kPad) repeats, in kExact / kNone, the samples at positions p mod N of the
// same permutation; in kBlock, the samples at the start of the rank's own sequence (sequence
// position p mod its share; a rank whose sequence is empty repeats dataset samples p mod N).
//
// ---------------------------------------------------------------------------------------------
// Resuming mid-epoch (SetEpoch's `consumed`).
//
// After k steps of an epoch the W ranks together consumed the global positions [0, k B W) of
// kExact / kNone (rank r's own positions r + jW for j < kB; positions past N are padding or
// absent). A sampler started at `consumed` = c (c <= N) splits the remaining positions [c, N) by
// the same rule with its own world size W' and batch size B': rank r' takes c + r', c + r' + W',
// ..., its share ceil((N - c - r') / W'), with the tail policy applied to the N - c remaining
// samples (kDrop drops the last (N - c) mod W', kPad pads to a multiple of W', padding repeating
// position p mod N). When c is a multiple of B' W' this is exactly the run that never stopped,
// from step c / (B' W') on; otherwise the global position is kept (every remaining sample is read
// exactly once with kShort) and the steps are counted anew from c.
//
// kBlock deals blocks to ranks by W and fills batches by B, so a mid-epoch position means "each
// rank consumed k B samples of its own sequence", with c = k B W. Restoring mid-epoch requires
// the same world size and batch size (c a multiple of B W); Create() refuses otherwise. A state
// at an epoch boundary (c = 0) restores with any world size.
//
// Thread safety: SetEpoch must not run concurrently with anything; the const methods are safe
// from many threads at once between SetEpoch calls.
#ifndef KILN_READER_SAMPLER_H_
#define KILN_READER_SAMPLER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "formats/status.h"
#include "reader/mixture.h"

namespace kiln {

// The version of the sample order the header specifies. Any change to the order of an existing
// (seed, epoch, options) bumps it; a saved loader state records it (reader/loader_state.h).
inline constexpr uint32_t kSamplerOrderVersion = 2;
// Feistel rounds of IndexPermutation (see the file comment).
inline constexpr int kFeistelRounds = 6;  // even: rounds go in (left, right) pairs

// The epoch's read order (see the file comment).
enum class ShuffleMode : uint8_t {
  kNone = 0,   // dataset order
  kExact = 1,  // one global permutation per epoch. The default.
  kBlock = 2,  // permuted blocks dealt to ranks, shuffled within windows of blocks
};

// "none", "exact" or "block".
const char* ShuffleModeName(ShuffleMode mode);
// Parses "none", "exact" or "block". Errors: InvalidArgument naming the value.
Result<ShuffleMode> ParseShuffleMode(const std::string& name);

// What happens to the N mod W samples that do not split evenly over W ranks. Every policy gives
// every rank the same number of batches per epoch, so collectives never hang (field case B34).
enum class TailPolicy {
  // Each rank keeps its own share: ceil(N/W) samples on ranks r < N mod W, floor(N/W) on the
  // others (kBlock: its own sequence). Every rank runs the same number of steps, that of the
  // largest share (rank 0's); a rank whose share runs out first gets a short, possibly empty
  // (size 0), last batch. No sample is dropped or repeated. The default.
  kShort,
  // Every rank takes as many samples as the smallest share (rank W - 1's): floor(N/W) in
  // kExact, the N mod W samples at the end of the epoch's permutation being skipped (different
  // ones each epoch when shuffling); in kBlock the end of each longer sequence is skipped.
  kDrop,
  // Every rank takes as many samples as the largest share (ceil(N/W) in kExact); the missing
  // positions repeat samples (see "padding" above, as PyTorch's DistributedSampler does) and are
  // flagged as padding.
  kPad,
};

// "short", "drop" or "pad" (kiln.Loader(tail=), the reader state); "unknown" for a value
// outside the enum.
const char* TailPolicyName(TailPolicy tail);
// Parses "short", "drop" or "pad". Errors: InvalidArgument "tail 'TEXT' must be short, drop or
// pad".
Result<TailPolicy> ParseTailPolicy(const std::string& name);

// kBlock: the fewest blocks each rank is dealt when N allows it (N >= 16 W); block_samples is
// capped at N / (kMinBlocksPerRank * W) to guarantee it.
inline constexpr uint64_t kMinBlocksPerRank = 16;

struct SamplerOptions {
  uint64_t num_samples = 0;                   // N, the dataset's samples
  uint32_t batch_size = 1;                    // >= 1
  ShuffleMode shuffle = ShuffleMode::kExact;  // Default kExact.
  uint64_t seed = 0;                          // Default 0.
  bool drop_last = false;                     // drop each rank's last partial batch. Default false.
  TailPolicy tail = TailPolicy::kShort;
  uint32_t rank = 0;        // in [0, world_size)
  uint32_t world_size = 1;  // >= 1
  // kBlock only: samples per block, >= 1 (values above max(1, N / (16 W)) act as that, see
  // kMinBlocksPerRank). Default 1.
  uint64_t block_samples = 1;
  // kBlock only: blocks per shuffle window, in [1, 2^20]. Default 16.
  uint32_t window_blocks = 16;
  // A mixture of several datasets (reader/mixture.h, reader/mixture.md): num_samples is then its
  // samples_per_epoch N, the N global positions are split as in kExact / kNone, and position p
  // holds the concatenated index mixture->Index(seed, epoch, shuffle == kExact, p) instead of
  // Perm(N, K_e)(p). kExact and kNone only. Default none (one dataset).
  std::shared_ptr<const MixtureSchedule> mixture;
};

// SplitMix64's output mixing function: a bijection of uint64 with good avalanche.
inline uint64_t SplitMix64Mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A keyed bijection of [0, n) evaluated per element: Perm(n, key) of the file comment. 9 words.
// Thread safety: a plain value; const methods are safe from many threads.
class IndexPermutation {
 public:
  IndexPermutation() = default;  // the identity of [0, 0)
  IndexPermutation(uint64_t n, uint64_t key);

  uint64_t size() const { return n_; }
  // Returns the image of x (x < size()).
  uint64_t operator()(uint64_t x) const {
    if (n_ <= 1) return x;
    do {
      x = Encrypt(x);
    } while (x >= n_);
    return x;
  }
  // Replaces each of values[0, count) (each < size()) by its image, as operator() would.
  // Several values are walked at once, so that the rounds of independent values overlap in the
  // CPU: a few ns per value instead of a round trip of dependent multiplies each.
  void Apply(uint64_t* values, size_t count) const;
  // Returns the x with (*this)(x) == y (y < size()).
  uint64_t Inverse(uint64_t y) const;

 private:
  uint64_t Encrypt(uint64_t x) const {
    uint64_t l = x >> right_bits_, r = x & mask_;
    for (int i = 0; i < kFeistelRounds; i += 2) {
      l ^= SplitMix64Mix(r ^ keys_[i]) >> (64 - left_bits_);
      r ^= SplitMix64Mix(l ^ keys_[i + 1]) >> (64 - right_bits_);
    }
    return (l << right_bits_) | r;
  }

  uint64_t n_ = 0;
  uint32_t left_bits_ = 1;   // a
  uint32_t right_bits_ = 1;  // b
  uint64_t mask_ = 1;        // 2^b - 1
  uint64_t keys_[kFeistelRounds] = {};
};

// A half-open range of dataset sample indices [begin, begin + count).
struct SampleRange {
  uint64_t begin = 0;
  uint64_t count = 0;
};

class Sampler {
 public:
  // Errors: InvalidArgument for batch_size 0, world_size 0, rank >= world_size, block_samples 0
  // or window_blocks outside [1, 2^20] in kBlock, a mixture in kBlock or with num_samples other
  // than its samples_per_epoch.
  static Result<Sampler> Create(const SamplerOptions& options);

  // Makes `epoch` current from its first step. O(1) time and memory.
  void SetEpoch(uint64_t epoch) { (void)SetEpoch(epoch, 0); }
  // Makes `epoch` current, resuming after `consumed` global positions (see "Resuming mid-epoch"
  // in the file comment). O(1). Errors: OutOfRange when consumed > N (kExact, kNone) or when it
  // is past the epoch's last step (kBlock); InvalidArgument in kBlock when consumed is not a
  // multiple of batch_size * world_size.
  Status SetEpoch(uint64_t epoch, uint64_t consumed);
  uint64_t epoch() const { return epoch_; }
  // The `consumed` the current epoch started from (0 unless resumed).
  uint64_t start_consumed() const { return start_consumed_; }

  // Samples of this rank's own share of an epoch, before the tail policy (kExact / kNone:
  // ceil((N - rank) / W); kBlock: the samples of its blocks).
  uint64_t own_samples() const { return own_real_; }
  // Samples this rank reads in a whole epoch, padding included.
  uint64_t samples_per_epoch() const;
  // Batches (steps) in a whole epoch: the same on every rank. Known before the epoch starts.
  uint64_t batches_per_epoch() const { return batches_; }
  // Batches left in the current epoch from where it started: batches_per_epoch() unless the
  // epoch was resumed. BatchSize and BatchSamples number batches from there.
  uint64_t batches_in_epoch() const { return segment_batches_; }
  // The step (within the whole epoch) of batch 0 of the current epoch: 0 unless resumed, then
  // floor(consumed / (batch_size * world_size)).
  uint64_t first_step() const { return first_step_; }
  // Global positions consumed by all ranks together after `batches` batches of the current
  // epoch: kExact / kNone min(start + batches * B * W, N); kBlock start + batches * B * W.
  uint64_t ConsumedAfter(uint64_t batches) const;

  // Samples in batch `b` (< batches_in_epoch()): batch_size except for a last partial batch.
  uint32_t BatchSize(uint64_t b) const;
  // Writes the dataset indices of samples [begin, end) of batch `b` (positions inside the batch)
  // to `indices`, and 1 for padded positions (kPad only) else 0 to `is_padding`.
  void BatchSamples(uint64_t b, uint32_t begin, uint32_t end, uint64_t* indices,
                    uint8_t* is_padding) const;

  // Returns the dataset index at global position `position` (< N) of the current epoch's
  // kExact / kNone order. In kBlock, the index at position `position` of this rank's sequence
  // (< its share). O(1).
  uint64_t PositionToIndex(uint64_t position) const;

  // kBlock: the samples per block actually used (block_samples clamped to
  // [1, max(1, N / (kMinBlocksPerRank * world size))]);
  // 1 otherwise.
  uint64_t block_samples() const { return block_samples_; }
  // kBlock: blocks dealt to this rank this epoch (its full blocks, plus the tail block on the
  // rank that holds it); 0 otherwise.
  uint64_t rank_blocks() const { return list_blocks_; }
  // kBlock: the dataset samples of this rank's dealt block `j` (< rank_blocks()) this epoch.
  SampleRange RankBlock(uint64_t j) const;
  // kBlock: the dealt blocks [*first, *end) whose samples batch `b` (< batches_in_epoch()) reads,
  // i.e. those of the windows its positions fall in (padding not included). For read-ahead.
  void BatchBlocks(uint64_t b, uint64_t* first, uint64_t* end) const;

  const SamplerOptions& options() const { return options_; }

 private:
  explicit Sampler(const SamplerOptions& options);
  // kBlock helpers over this rank's sequence (see the file comment).
  uint64_t OwnShare(uint32_t rank) const;
  uint64_t BlockStart(uint64_t j) const;  // sequence position of dealt block j (j <= list)
  uint64_t BlockOfPosition(uint64_t p) const;
  uint64_t BlockSequenceIndex(uint64_t p, const IndexPermutation& window) const;
  IndexPermutation WindowPermutation(uint64_t w) const;

  SamplerOptions options_;
  uint64_t share_ = 0;    // samples this rank reads per whole epoch, padding included
  uint64_t batches_ = 0;  // steps per whole epoch
  uint64_t epoch_ = 0;
  uint64_t epoch_key_ = 0;        // K_e
  IndexPermutation permutation_;  // kExact: Perm(N, K_e); kBlock: Q
  // Resumption (SetEpoch's consumed).
  uint64_t start_consumed_ = 0;
  uint64_t first_step_ = 0;
  uint64_t segment_share_ = 0;  // samples of the current segment this rank reads
  uint64_t segment_batches_ = 0;
  uint64_t segment_start_ = 0;  // kBlock: own sequence position of the segment's first sample
  // kBlock.
  uint64_t block_samples_ = 1;
  uint64_t full_blocks_ = 0;      // M
  uint64_t tail_samples_ = 0;     // T
  uint64_t own_full_blocks_ = 0;  // m_r
  bool has_tail_ = false;         // this rank holds the tail block
  uint64_t tail_slot_ = 0;        // j_t, when has_tail_
  uint64_t list_blocks_ = 0;      // m_r (+1 with the tail)
  uint64_t own_real_ = 0;         // this rank's own sequence length (its real samples)
};

}  // namespace kiln

#endif  // KILN_READER_SAMPLER_H_
