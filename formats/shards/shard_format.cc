#include "formats/shards/shard_format.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "formats/xxh3.h"

namespace kiln {

void EncodeShardHeader(const ShardHeader& header, uint8_t* out) {
  std::memset(out, 0, kShardHeaderBytes);
  std::memcpy(out, kShardMagic, 8);
  StoreLE16(out + 8, kShardVersionMajor);
  StoreLE16(out + 10, kShardVersionMinor);
  StoreLE32(out + 12, header.jpeg_records() ? kShardFlagJpegRecords : 0);  // flags
  StoreLE32(out + 16, kShardHeaderBytes);
  StoreLE32(out + 20, header.record_alignment);
  out[24] = static_cast<uint8_t>(header.schema.dtype);
  out[25] = static_cast<uint8_t>(header.schema.layout);
  StoreLE16(out + 26, static_cast<uint16_t>(header.schema.channels));
  StoreLE32(out + 28, header.schema.height);
  StoreLE32(out + 32, header.schema.width);
  StoreLE32(out + 36, header.shard_index);
  StoreLE64(out + 40, header.first_sample);
  // Bytes 48..51: the JPEG max side under kShardFlagJpegRecords; otherwise 48..55 are reserved
  // and zero.
  if (header.jpeg_records()) StoreLE32(out + 48, header.jpeg_max_side);
  StoreLE64(out + 56, Xxh3(out, 56));
}

Result<ShardHeader> DecodeShardHeader(const uint8_t* in) {
  if (std::memcmp(in, kShardMagic, 8) != 0) {
    return Status::Corruption("bad magic (not a kiln shard)");
  }
  const uint16_t major = LoadLE16(in + 8), minor = LoadLE16(in + 10);
  if (major != kShardVersionMajor) {
    return Status::NotSupported("unsupported shard version " + std::to_string(major) + "." +
                                std::to_string(minor) + " (this kiln reads version " +
                                std::to_string(kShardVersionMajor) + ".x)");
  }
  const uint64_t stored = LoadLE64(in + 56), computed = Xxh3(in, 56);
  if (stored != computed) {
    return Status::Corruption("header checksum mismatch (stored " + FormatChecksum(stored) +
                              ", computed " + FormatChecksum(computed) + ")");
  }
  const uint32_t flags = LoadLE32(in + 12);
  if ((flags & ~kShardKnownFlags) != 0) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%08x", flags);
    return Status::Corruption(std::string("nonzero header flags ") + hex +
                              " (this kiln knows only bit 0, JPEG records)");
  }
  if (LoadLE32(in + 16) != kShardHeaderBytes) return Status::Corruption("bad header size");
  ShardHeader header;
  header.record_alignment = LoadLE32(in + 20);
  const uint32_t a = header.record_alignment;
  if (a < kMinRecordAlignment || a > kMaxRecordAlignment || (a & (a - 1)) != 0) {
    return Status::Corruption("invalid record alignment " + std::to_string(a));
  }
  header.schema.dtype = static_cast<DType>(in[24]);
  header.schema.layout = static_cast<Layout>(in[25]);
  header.schema.channels = LoadLE16(in + 26);
  header.schema.height = LoadLE32(in + 28);
  header.schema.width = LoadLE32(in + 32);
  Status schema_ok = header.schema.Validate();
  if (!schema_ok.ok()) return Status::Corruption("invalid schema: " + schema_ok.message());
  header.shard_index = LoadLE32(in + 36);
  header.first_sample = LoadLE64(in + 40);
  if ((flags & kShardFlagJpegRecords) != 0) {
    const uint32_t side = LoadLE32(in + 48);
    if (side == 0 || side > kMaxJpegSide) {
      return Status::Corruption("JPEG records: max side " + std::to_string(side) + " outside [1, " +
                                std::to_string(kMaxJpegSide) + "]");
    }
    const TensorSchema& sc = header.schema;
    if (sc.dtype != DType::kUint8 || sc.layout != Layout::kHWC || sc.height != side ||
        sc.width != side) {
      return Status::Corruption("JPEG records: the schema must be uint8 HWC " +
                                std::to_string(side) + "x" + std::to_string(side) +
                                " (the max side), not " + std::string(DTypeName(sc.dtype)) + " " +
                                std::string(LayoutName(sc.layout)) + " " + sc.ShapeString());
    }
    header.jpeg_max_side = side;
  }
  return header;
}

void EncodeShardIndexEntry(const ShardIndexEntry& entry, uint8_t* out) {
  StoreLE64(out + 0, entry.offset);
  StoreLE32(out + 8, entry.stored_size);
  StoreLE32(out + 12, entry.raw_size);
  StoreLE64(out + 16, static_cast<uint64_t>(entry.label));
  StoreLE64(out + 24, entry.checksum);
  StoreLE32(out + 32, entry.key_offset);
  StoreLE16(out + 36, entry.key_size);
  out[38] = static_cast<uint8_t>(entry.codec);
  out[39] = 0;  // reserved
}

ShardIndexEntry DecodeShardIndexEntry(const uint8_t* in) {
  ShardIndexEntry entry;
  entry.offset = LoadLE64(in + 0);
  entry.stored_size = LoadLE32(in + 8);
  entry.raw_size = LoadLE32(in + 12);
  entry.label = static_cast<int64_t>(LoadLE64(in + 16));
  entry.checksum = LoadLE64(in + 24);
  entry.key_offset = LoadLE32(in + 32);
  entry.key_size = LoadLE16(in + 36);
  entry.codec = static_cast<Codec>(in[38]);
  return entry;
}

void EncodeShardFooter(const ShardFooter& footer, uint8_t* out) {
  std::memset(out, 0, kShardFooterBytes);
  StoreLE64(out + 0, footer.index_offset);
  StoreLE64(out + 8, footer.record_count);
  StoreLE64(out + 16, footer.keys_offset);
  StoreLE64(out + 24, footer.keys_size);
  StoreLE64(out + 32, footer.index_checksum);
  // Bytes 40..47 are reserved and zero.
  StoreLE64(out + 48, Xxh3(out, 48));
  std::memcpy(out + 56, kShardFooterMagic, 8);
}

Result<ShardFooter> DecodeShardFooter(const uint8_t* in, uint64_t file_size) {
  if (std::memcmp(in + 56, kShardFooterMagic, 8) != 0) {
    return Status::Corruption("no footer magic (incomplete or truncated shard)");
  }
  const uint64_t stored = LoadLE64(in + 48), computed = Xxh3(in, 48);
  if (stored != computed) {
    return Status::Corruption("footer checksum mismatch (stored " + FormatChecksum(stored) +
                              ", computed " + FormatChecksum(computed) + ")");
  }
  ShardFooter f;
  f.index_offset = LoadLE64(in + 0);
  f.record_count = LoadLE64(in + 8);
  f.keys_offset = LoadLE64(in + 16);
  f.keys_size = LoadLE64(in + 24);
  f.index_checksum = LoadLE64(in + 32);
  // Section 5's bounds, written so that no sum can overflow.
  const uint64_t footer_offset = file_size - kShardFooterBytes;
  const bool ok = file_size >= kShardHeaderBytes + kShardFooterBytes &&
                  f.index_offset >= kShardHeaderBytes && f.index_offset % 8 == 0 &&
                  f.index_offset <= footer_offset &&
                  f.record_count <= (footer_offset - f.index_offset) / kShardIndexEntryBytes &&
                  f.keys_offset == f.index_offset + f.record_count * kShardIndexEntryBytes &&
                  f.keys_size <= footer_offset - f.keys_offset &&
                  footer_offset - (f.keys_offset + f.keys_size) < 8;
  if (!ok) {
    return Status::Corruption(
        "footer fields out of bounds (index at " + std::to_string(f.index_offset) + ", " +
        std::to_string(f.record_count) + " records, keys at " + std::to_string(f.keys_offset) +
        "+" + std::to_string(f.keys_size) + ", file size " + std::to_string(file_size) + ")");
  }
  return f;
}

}  // namespace kiln
