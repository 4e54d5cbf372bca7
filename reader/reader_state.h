// kiln::ReaderState: where a Loader is in its stream, as a few integers, to save with a training
// checkpoint and restore mid-epoch in O(1) (no replay of consumed batches).
//
// The read order is a pure function of (seed, epoch) and the order options (reader/sampler.h),
// so a position is all the state there is: the epoch, and the number of the epoch's global
// positions the ranks together consumed. Loader::state() returns it; LoaderOptions::resume
// starts a loader from it (reader/loader.h, "Checkpoint and resume", says what may change
// between save and restore: world size, batch size, threads, ...).
//
// Encode() writes the versioned binary form specified byte by byte in reader/reader_state.md
// (kReaderStateBytes = 96 bytes, little-endian, with its own XXH3-64 checksum); Decode() reads
// it back and refuses anything else with a clear error.
//
// Thread safety: a plain value.
#ifndef KILN_READER_READER_STATE_H_
#define KILN_READER_READER_STATE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"
#include "reader/sampler.h"

namespace kiln {

// reader/reader_state.md, "Layout": magic, then the format version this kiln writes and reads.
inline constexpr char kReaderStateMagic[4] = {'K', 'R', 'S', 'T'};
inline constexpr uint16_t kReaderStateVersion = 1;
// Encoded bytes of a version-1 state (reader/reader_state.md, "Layout").
inline constexpr size_t kReaderStateBytes = 96;
// The version of a state with a mixture section (reader/reader_state.md, "Version 2"): the state
// of a Loader over a mixture of datasets (reader/mixture.h). A single dataset's state stays
// version 1, byte for byte.
inline constexpr uint16_t kReaderStateMixtureVersion = 2;
// Bytes of one source's entry in the mixture section.
inline constexpr size_t kMixtureSourceBytes = 24;
// Encoded bytes of a version-2 state with `sources` sources: 104 + 24 per source.
constexpr size_t ReaderStateBytes(size_t sources) { return 104 + kMixtureSourceBytes * sources; }

// One source of a mixture as its state records it (reader/reader_state.md, "Version 2").
struct MixtureSourceState {
  uint64_t fingerprint = 0;  // the source dataset's manifest checksum
  uint64_t num_samples = 0;  // its samples, n_s
  uint64_t quota = 0;        // samples drawn from it per epoch, c_s
};

struct ReaderState {
  // The sampler order version the position refers to (kSamplerOrderVersion when saved).
  uint32_t order_version = kSamplerOrderVersion;
  uint64_t epoch = 0;
  // Global positions of `epoch` consumed by all ranks together: after k steps of batch size B
  // on W ranks, k * B * W, capped at the dataset's samples in kExact / kNone (sampler.h,
  // "Resuming mid-epoch"). 0 at the start of the epoch.
  uint64_t samples_consumed = 0;
  // The options that fix the order; a restore must match them.
  uint64_t seed = 0;
  ShuffleMode shuffle = ShuffleMode::kExact;
  uint64_t block_samples =
      0;  // kBlock: samples per block as asked (before the sampler's cap); 0 otherwise
  uint32_t window_blocks = 0;  // kBlock: blocks per window; 0 otherwise
  // How the position was reached: batch size and world size at save time, tail policy.
  uint32_t batch_size = 0;
  uint32_t world_size = 0;
  TailPolicy tail = TailPolicy::kShort;
  bool drop_last = false;
  // Augmentation settings (reader/augmenter.h); a restore must match them.
  uint32_t crop_height = 0;
  uint32_t crop_width = 0;
  bool flip = false;
  // RandomResizedCrop on: crop_height/crop_width then hold its output size, and
  // resized_crop_digest the low 32 bits of XXH3-64 of its (scale_min, scale_max, ratio_min,
  // ratio_max) doubles, and a byte 1 after them for area interpolation (ResizedCropDigest). Both
  // zero when off, so older states keep their bytes.
  bool resized_crop = false;
  uint32_t resized_crop_digest = 0;
  // The dataset: its sample count and fingerprint (the manifest checksum, XXH3-64 of the
  // canonical manifest: formats/manifest.h ManifestChecksum).
  // For a mixture: N (samples_per_epoch) and the mixture's fingerprint (reader/reader_state.md,
  // "Version 2").
  uint64_t num_samples = 0;
  uint64_t dataset_fingerprint = 0;
  // The mixture section (version 2): empty for one dataset.
  uint32_t mixture_version = 0;  // kMixtureOrderVersion when saved
  std::vector<MixtureSourceState> mixture_sources;

  // Returns the encoding (reader/reader_state.md): version 1, kReaderStateBytes bytes, without
  // mixture sources; version 2, ReaderStateBytes(sources), with them.
  std::string Encode() const;
  // Parses an encoding of version 1 or 2. Errors: Corruption for fewer bytes than the layout
  // needs ("truncated: ... bytes, a version-1 reader state is 96"), a wrong magic, a checksum
  // mismatch (stored and computed named), a length field that disagrees, a source count outside
  // [1, kMaxMixtureSources], or a field out of range (naming it); NotSupported for another
  // format version.
  static Result<ReaderState> Decode(const void* data, size_t size);
  static Result<ReaderState> Decode(const std::string& bytes) {
    return Decode(bytes.data(), bytes.size());
  }

  // One line for messages: "epoch 3, 4096 samples consumed, seed 7, shuffle exact, ...".
  std::string ToString() const;
};

}  // namespace kiln

#endif  // KILN_READER_READER_STATE_H_
