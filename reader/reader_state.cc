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
                 kOffCropHeight = 76, kOffCropWidth = 80, kOffReserved2 = 84, kOffChecksum = 88;
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
  uint8_t out[kReaderStateBytes] = {};
  std::memcpy(out, kReaderStateMagic, 4);
  Put(out + kOffVersion, kReaderStateVersion, 2);
  Put(out + kOffLength, kReaderStateBytes, 2);
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
  Put(out + kOffChecksum, Xxh3(out, kOffChecksum), 8);
  return std::string(reinterpret_cast<const char*>(out), kReaderStateBytes);
}

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
  if (version != kReaderStateVersion) {
    return Status::NotSupported(where + ": format version " + std::to_string(version) +
                                "; this kiln reads version " + std::to_string(kReaderStateVersion));
  }
  const uint64_t length = Get(p + kOffLength, 2);
  if (size < kReaderStateBytes) {
    return Status::Corruption(where + ": truncated: " + std::to_string(size) +
                              " bytes, a version-1 reader state is 96");
  }
  if (length != kReaderStateBytes || size != kReaderStateBytes) {
    return Status::Corruption(where + ": length field " + std::to_string(length) + ", " +
                              std::to_string(size) + " bytes given; version 1 is 96 bytes");
  }
  const uint64_t stored = Get(p + kOffChecksum, 8), computed = Xxh3(p, kOffChecksum);
  if (stored != computed) {
    return Status::Corruption(where + ": checksum mismatch at byte offset 88 (stored " +
                              HexDigest(stored) + ", computed " + HexDigest(computed) +
                              "): the state is damaged");
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
  return s;
}

}  // namespace kiln
