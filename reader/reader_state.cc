#include "reader/reader_state.h"

#include <cstring>

#include "formats/manifest.h"
#include "formats/xxh3.h"

namespace kiln {

namespace {

// Field offsets of version 1 (reader/reader_state.md, "Layout").
constexpr size_t kOffVersion = 4, kOffLength = 6, kOffOrderVersion = 8, kOffShuffle = 12,
                 kOffTail = 13, kOffFlags = 14, kOffReserved1 = 15, kOffEpoch = 16,
                 kOffConsumed = 24, kOffSeed = 32, kOffSamples = 40, kOffFingerprint = 48,
                 kOffBlockSamples = 56, kOffWindow = 64, kOffBatch = 68, kOffWorld = 72,
                 kOffCropHeight = 76, kOffCropWidth = 80, kOffReserved2 = 84;
// Version 2 (the mixture section): at 88 where version 1 has its checksum.
constexpr size_t kOffMixtureVersion = 88, kOffMixtureSources = 92, kOffMixtureSourceTable = 96;
constexpr uint8_t kFlagDropLast = 1, kFlagFlip = 2, kFlagResizedCrop = 4;

void Put(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t Get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace

std::string ReaderState::Encode() const {
  const bool mixture = !mixture_sources.empty();
  const size_t length = mixture ? ReaderStateBytes(mixture_sources.size()) : kReaderStateBytes;
  std::string bytes(length, '\0');
  auto* out = reinterpret_cast<uint8_t*>(bytes.data());
  std::memcpy(out, kReaderStateMagic, 4);
  Put(out + kOffVersion, mixture ? kReaderStateMixtureVersion : kReaderStateVersion, 2);
  Put(out + kOffLength, length, 2);
  Put(out + kOffOrderVersion, order_version, 4);
  out[kOffShuffle] = static_cast<uint8_t>(shuffle);
  out[kOffTail] = static_cast<uint8_t>(tail);
  out[kOffFlags] = (drop_last ? kFlagDropLast : 0) | (flip ? kFlagFlip : 0) |
                   (resized_crop ? kFlagResizedCrop : 0);
  Put(out + kOffEpoch, epoch, 8);
  Put(out + kOffConsumed, samples_consumed, 8);
  Put(out + kOffSeed, seed, 8);
  Put(out + kOffSamples, num_samples, 8);
  Put(out + kOffFingerprint, dataset_fingerprint, 8);
  Put(out + kOffBlockSamples, block_samples, 8);
  Put(out + kOffWindow, window_blocks, 4);
  Put(out + kOffBatch, batch_size, 4);
  Put(out + kOffWorld, world_size, 4);
  Put(out + kOffCropHeight, crop_height, 4);
  Put(out + kOffCropWidth, crop_width, 4);
  Put(out + kOffReserved2, resized_crop ? resized_crop_digest : 0, 4);
  if (mixture) {
    Put(out + kOffMixtureVersion, mixture_version, 4);
    Put(out + kOffMixtureSources, mixture_sources.size(), 4);
    for (size_t k = 0; k < mixture_sources.size(); ++k) {
      uint8_t* src = out + kOffMixtureSourceTable + k * kMixtureSourceBytes;
      Put(src, mixture_sources[k].fingerprint, 8);
      Put(src + 8, mixture_sources[k].num_samples, 8);
      Put(src + 16, mixture_sources[k].quota, 8);
    }
  }
  Put(out + length - 8, Xxh3(out, length - 8), 8);
  return bytes;
}

namespace {

// The byte length a state of `version` must have, from the bytes given; an error when it cannot
// be read or disagrees.
Result<size_t> ExpectedLength(const uint8_t* p, size_t size, uint64_t version,
                              const std::string& where) {
  const uint64_t length = Get(p + kOffLength, 2);
  if (version == kReaderStateVersion) {
    if (size < kReaderStateBytes) {
      return Status::Corruption(where + ": truncated: " + std::to_string(size) +
                                " bytes, a version-1 reader state is 96");
    }
    if (length != kReaderStateBytes || size != kReaderStateBytes) {
      return Status::Corruption(where + ": length field " + std::to_string(length) + ", " +
                                std::to_string(size) + " bytes given; version 1 is 96 bytes");
    }
    return kReaderStateBytes;
  }
  if (size < kOffMixtureSourceTable) {
    return Status::Corruption(where + ": truncated: " + std::to_string(size) +
                              " bytes, a version-2 reader state is at least " +
                              std::to_string(ReaderStateBytes(1)));
  }
  const uint64_t sources = Get(p + kOffMixtureSources, 4);
  if (sources == 0 || sources > kMaxMixtureSources) {
    return Status::Corruption(where + ": " + std::to_string(sources) +
                              " mixture sources at byte offset 92; must be in [1, " +
                              std::to_string(kMaxMixtureSources) + "]");
  }
  const size_t want = ReaderStateBytes(sources);
  if (size < want) {
    return Status::Corruption(where + ": truncated: " + std::to_string(size) + " bytes, a " +
                              std::to_string(sources) + "-source version-2 reader state is " +
                              std::to_string(want));
  }
  if (length != want || size != want) {
    return Status::Corruption(where + ": length field " + std::to_string(length) + ", " +
                              std::to_string(size) + " bytes given; a " + std::to_string(sources) +
                              "-source version-2 state is " + std::to_string(want) + " bytes");
  }
  return want;
}

}  // namespace

Result<ReaderState> ReaderState::Decode(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  const std::string where = "reader state";
  if (size < kOffLength + 2) {
    return Status::Corruption(where + ": truncated: " + std::to_string(size) +
                              " bytes, a version-1 reader state is 96");
  }
  if (std::memcmp(p, kReaderStateMagic, 4) != 0) {
    return Status::Corruption(where + ": not a kiln reader state (bytes 0-3 are not \"KRST\")");
  }
  const uint64_t version = Get(p + kOffVersion, 2);
  if (version != kReaderStateVersion && version != kReaderStateMixtureVersion) {
    return Status::NotSupported(where + ": format version " + std::to_string(version) +
                                "; this kiln reads versions 1 and 2");
  }
  KILN_ASSIGN_OR_RETURN(const size_t length, ExpectedLength(p, size, version, where));
  const size_t sum_at = length - 8;
  const uint64_t stored = Get(p + sum_at, 8), computed = Xxh3(p, sum_at);
  if (stored != computed) {
    return Status::Corruption(where + ": checksum mismatch at byte offset " +
                              std::to_string(sum_at) + " (stored " + HexDigest(stored) +
                              ", computed " + HexDigest(computed) + "): the state is damaged");
  }
  const uint8_t shuffle = p[kOffShuffle], tail = p[kOffTail], flags = p[kOffFlags];
  if (shuffle > 2) {
    return Status::Corruption(where + ": shuffle mode " + std::to_string(shuffle) +
                              " at byte offset 12 is not 0, 1 or 2");
  }
  if (tail > 2) {
    return Status::Corruption(where + ": tail policy " + std::to_string(tail) +
                              " at byte offset 13 is not 0, 1 or 2");
  }
  if ((flags & ~(kFlagDropLast | kFlagFlip | kFlagResizedCrop)) != 0 || p[kOffReserved1] != 0 ||
      ((flags & kFlagResizedCrop) == 0 && Get(p + kOffReserved2, 4) != 0)) {
    return Status::Corruption(where + ": reserved bits set (byte offsets 14-15, 84-87)");
  }
  ReaderState s;
  s.order_version = static_cast<uint32_t>(Get(p + kOffOrderVersion, 4));
  s.shuffle = static_cast<ShuffleMode>(shuffle);
  s.tail = static_cast<TailPolicy>(tail);
  s.drop_last = (flags & kFlagDropLast) != 0;
  s.flip = (flags & kFlagFlip) != 0;
  s.resized_crop = (flags & kFlagResizedCrop) != 0;
  s.resized_crop_digest = static_cast<uint32_t>(Get(p + kOffReserved2, 4));
  s.epoch = Get(p + kOffEpoch, 8);
  s.samples_consumed = Get(p + kOffConsumed, 8);
  s.seed = Get(p + kOffSeed, 8);
  s.num_samples = Get(p + kOffSamples, 8);
  s.dataset_fingerprint = Get(p + kOffFingerprint, 8);
  s.block_samples = Get(p + kOffBlockSamples, 8);
  s.window_blocks = static_cast<uint32_t>(Get(p + kOffWindow, 4));
  s.batch_size = static_cast<uint32_t>(Get(p + kOffBatch, 4));
  s.world_size = static_cast<uint32_t>(Get(p + kOffWorld, 4));
  s.crop_height = static_cast<uint32_t>(Get(p + kOffCropHeight, 4));
  s.crop_width = static_cast<uint32_t>(Get(p + kOffCropWidth, 4));
  if (s.batch_size == 0 || s.world_size == 0) {
    return Status::Corruption(where +
                              ": batch size and world size (byte offsets 68, 72) must be "
                              "at least 1");
  }
  if (version == kReaderStateMixtureVersion) {
    s.mixture_version = static_cast<uint32_t>(Get(p + kOffMixtureVersion, 4));
    const uint64_t sources = Get(p + kOffMixtureSources, 4);
    for (uint64_t k = 0; k < sources; ++k) {
      const uint8_t* src = p + kOffMixtureSourceTable + k * kMixtureSourceBytes;
      s.mixture_sources.push_back({Get(src, 8), Get(src + 8, 8), Get(src + 16, 8)});
    }
  }
  return s;
}

std::string ReaderState::ToString() const {
  std::string s = "epoch " + std::to_string(epoch) + ", " + std::to_string(samples_consumed) +
                  " samples consumed, seed " + std::to_string(seed) + ", shuffle " +
                  ShuffleModeName(shuffle);
  if (shuffle == ShuffleMode::kBlock) {
    s += " (" + std::to_string(block_samples) + " samples per block, window " +
         std::to_string(window_blocks) + ")";
  }
  s += ", batch size " + std::to_string(batch_size) + ", world size " + std::to_string(world_size) +
       ", tail " + TailPolicyName(tail) + (drop_last ? ", drop_last" : "") + ", crop " +
       std::to_string(crop_height) + "x" + std::to_string(crop_width) +
       (resized_crop ? " resized" : "") + (flip ? ", flip" : "") + ", dataset of " +
       std::to_string(num_samples) + " samples, fingerprint " + HexDigest(dataset_fingerprint);
  if (!mixture_sources.empty()) {
    s += ", a mixture of " + std::to_string(mixture_sources.size()) + " datasets";
  }
  return s;
}

}  // namespace kiln
