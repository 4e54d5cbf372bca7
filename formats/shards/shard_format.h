// formats/shards/: the shard backend. shard_format.{h,md} (this header: the byte layout),
// shard_writer.h (one file) and shard_set_writer.h (a sequence, the backend's writer),
// shard_reader.h (one mapped file), shard_dataset.h (the Dataset), shard_verifier.h, and
// shards_backend.cc (its row of formats/format_registry.h).
//
// The kiln shard file format, version 1: constants, and the explicit little-endian encoding and
// decoding of its three fixed structures (header, index entry, footer).
//
// The byte-level specification is formats/shards/shard_format.md; section numbers below refer to
// it. The little-endian coding and alignment helpers (formats/byte_coding.h) and the codec and
// record checksum (formats/codec.h) that the shards share with the other backends are included.
// Nothing here touches files: ShardWriter and ShardReader do. Every Decode* function validates
// what it can see on its own (magic, version, reserved bits, checksums) and returns Corruption
// with a message that starts with the reason; callers prefix the file name and offset.
//
// Thread safety: stateless functions; safe from any thread.
#ifndef KILN_FORMATS_SHARD_FORMAT_H_
#define KILN_FORMATS_SHARD_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "formats/byte_coding.h"
#include "formats/codec.h"
#include "formats/status.h"
#include "formats/tensor_schema.h"

namespace kiln {

// Section 2: header magic "KILNSHRD" and footer magic "KILNSEND", 8 bytes each.
inline constexpr char kShardMagic[8] = {'K', 'I', 'L', 'N', 'S', 'H', 'R', 'D'};
inline constexpr char kShardFooterMagic[8] = {'K', 'I', 'L', 'N', 'S', 'E', 'N', 'D'};
// Section 6: readers accept exactly this major version; minor versions only add meaning to
// reserved fields that version 1.0 readers may ignore.
inline constexpr uint16_t kShardVersionMajor = 1;
inline constexpr uint16_t kShardVersionMinor = 0;
// Section 2, 4, 5: fixed sizes of the three structures, in bytes.
inline constexpr size_t kShardHeaderBytes = 64;
inline constexpr size_t kShardIndexEntryBytes = 40;
inline constexpr size_t kShardFooterBytes = 64;
// Section 2 and 6: header flag bits. kShardFlagJpegRecords: every record is one JPEG image
// (Codec::kJpeg) of at most ShardHeader::jpeg_max_side pixels on each side, stored at header
// bytes 48..51. A 1.0 reader refuses any nonzero flags, so it refuses such a shard by name.
inline constexpr uint32_t kShardFlagJpegRecords = 1u << 0;
inline constexpr uint32_t kShardKnownFlags = kShardFlagJpegRecords;
// File name suffix of a shard, and the prefix of its name inside a dataset directory.
inline constexpr std::string_view kShardSuffix = ".kiln";

// Section 2: the fixed 64-byte header at offset 0.
struct ShardHeader {
  uint32_t record_alignment = kDefaultRecordAlignment;  // bytes, power of two in [8, 1 MiB]
  TensorSchema schema;        // every record's decoded tensor has this schema
  uint32_t shard_index = 0;   // position of this shard in its dataset, from 0
  uint64_t first_sample = 0;  // dataset-wide index of this shard's record 0
  // JPEG records (flag kShardFlagJpegRecords, bytes 48..51): the longest side of any record's
  // image in pixels, in [1, kMaxJpegSide]; the schema is then uint8 HWC max_side x max_side (an
  // upper bound: each record is its own size, raw_size = its height x width x channels).
  // 0 (the default): raw or zstd records of exactly the schema, flags 0, bytes 48..55 zero.
  uint32_t jpeg_max_side = 0;
  bool jpeg_records() const { return jpeg_max_side != 0; }
};

// Section 4: one fixed 40-byte entry of the index, per record, in record order.
struct ShardIndexEntry {
  uint64_t offset = 0;       // bytes from the start of the file to the record's first byte
  uint32_t stored_size = 0;  // bytes stored (compressed size when codec is zstd)
  uint32_t raw_size = 0;     // bytes of the decoded tensor; equals schema.sample_bytes(), or
                             // for a JPEG record its image's height x width x channels
  int64_t label = 0;         // class label
  uint64_t checksum = 0;     // RecordChecksum(stored bytes, label)
  uint32_t key_offset = 0;   // bytes from the start of the keys section
  uint16_t key_size = 0;     // bytes of the UTF-8 key
  Codec codec = Codec::kNone;
};

// Section 5: the fixed 64-byte footer that ends every complete shard.
struct ShardFooter {
  uint64_t index_offset = 0;    // bytes from the file start to index entry 0
  uint64_t record_count = 0;    // records (samples) in this shard
  uint64_t keys_offset = 0;     // bytes from the file start to the keys section
  uint64_t keys_size = 0;       // bytes in the keys section
  uint64_t index_checksum = 0;  // XXH3-64 (seed 0) of [index_offset, keys_offset + keys_size)
};

// Encodes into exactly kShardHeaderBytes bytes at `out`, including the header checksum.
void EncodeShardHeader(const ShardHeader& header, uint8_t* out);
// Decodes kShardHeaderBytes bytes. Errors: NotSupported ("unsupported shard version 2.0");
// Corruption ("bad magic", "header checksum mismatch", "nonzero header flags 0x... (unknown
// bits)", "invalid schema: ...", "invalid record alignment", "JPEG records: ..." for a max side
// out of range or a schema other than uint8 HWC max_side x max_side).
Result<ShardHeader> DecodeShardHeader(const uint8_t* in);

void EncodeShardIndexEntry(const ShardIndexEntry& entry, uint8_t* out);
// Decodes kShardIndexEntryBytes bytes. Never fails: bounds are checked against the file by
// ShardReader::EntryProblem, and content by the record checksum.
ShardIndexEntry DecodeShardIndexEntry(const uint8_t* in);

void EncodeShardFooter(const ShardFooter& footer, uint8_t* out);
// Decodes kShardFooterBytes bytes and checks them against `file_size` (section 5's bounds).
// Errors: Corruption ("no footer magic (incomplete or truncated shard)", "footer checksum
// mismatch", "index out of bounds ...").
Result<ShardFooter> DecodeShardFooter(const uint8_t* in, uint64_t file_size);

}  // namespace kiln

#endif  // KILN_FORMATS_SHARD_FORMAT_H_
