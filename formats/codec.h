// kiln::Codec and the record checksum: how every backend's records store a sample's raw tensor
// bytes (formats/shards/shard_format.md section 4; LMDB values and HDF5 samples use the same
// fields). Thread safety: stateless functions.
#ifndef KILN_FORMATS_CODEC_H_
#define KILN_FORMATS_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

// The longest key (a UTF-8 relative path) a record can carry, in bytes
// (formats/shards/shard_format.md section 4).
inline constexpr size_t kMaxKeyBytes = 65535;

// The largest max side of JPEG records, in pixels (a JPEG's side is at most 65535; libjpeg-turbo
// refuses more than 65500). formats/shards/shard_format.md section 2.
inline constexpr uint32_t kMaxJpegSide = 65500;

// How a record's stored bytes encode its raw tensor bytes (formats/shards/shard_format.md section
// 4, field `codec`).
enum class Codec : uint8_t {
  kNone = 0,  // stored bytes are the raw tensor bytes; stored_size == raw_size.
  kZstd = 1,  // stored bytes are one Zstandard frame (RFC 8878) of the raw tensor bytes.
  // Stored bytes are one baseline or progressive JPEG (ITU T.81, JFIF) of a uint8 HWC image of
  // its own size (at most the shard's max side on each side); raw_size is height x width x
  // channels of that image. Only in shards whose header carries kShardFlagJpegRecords
  // (formats/shards/shard_format.md sections 2 and 4): the reader decodes and resizes it at read
  // time (reader/jpeg_sample_decoder.h).
  kJpeg = 2,
};
std::string_view CodecName(Codec codec);

// The per-record checksum (formats/shards/shard_format.md section 4): XXH3-64 of the stored bytes
// with the label (as a two's-complement uint64) as seed, so that a damaged label is caught like
// damaged pixels.
uint64_t RecordChecksum(const void* stored, size_t stored_size, int64_t label);

// Returns "0x" and the 16 hex digits of a checksum, as every kiln message prints checksums.
std::string FormatChecksum(uint64_t checksum);

}  // namespace kiln

#endif  // KILN_FORMATS_CODEC_H_
