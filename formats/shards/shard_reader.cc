#include "formats/shards/shard_reader.h"

#include <cstdio>

#include "formats/xxh3.h"

namespace kiln {

Result<std::unique_ptr<ShardReader>> ShardReader::Open(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  return Open(std::move(file));
}

Result<std::unique_ptr<ShardReader>> ShardReader::Open(std::shared_ptr<const MappedFile> file) {
  const std::string path = file->path();
  const uint64_t size = file->size();
  if (size < kShardHeaderBytes + kShardFooterBytes) {
    // Located where the footer would start: the end of the file is what is missing.
    return Status::Corruption("file of " + std::to_string(size) +
                              " bytes is too small to be a shard (incomplete or truncated)")
        .WithLocation(
            {path, -1,
             static_cast<int64_t>(size >= kShardFooterBytes ? size - kShardFooterBytes : 0)},
            path);
  }
  Result<ShardHeader> header = DecodeShardHeader(file->data());
  if (!header.ok()) return header.status().WithLocation({path, -1, 0}, path + " (offset 0)");
  Result<ShardFooter> footer = DecodeShardFooter(file->data() + size - kShardFooterBytes, size);
  if (!footer.ok()) {
    const uint64_t at = size - kShardFooterBytes;
    return footer.status().WithLocation({path, -1, static_cast<int64_t>(at)},
                                        path + " (footer at offset " + std::to_string(at) + ")");
  }
  return std::unique_ptr<ShardReader>(new ShardReader(std::move(file), *header, *footer));
}

std::string ShardReader::RecordLocation(uint64_t i, uint64_t offset) const {
  return path() + " record " + std::to_string(i) + " (offset " + std::to_string(offset) + ")";
}

Status ShardReader::AtRecord(const Status& status, uint64_t i, uint64_t offset) const {
  return status.WithLocation({path(), static_cast<int64_t>(i), static_cast<int64_t>(offset)},
                             RecordLocation(i, offset));
}

Status ShardReader::RecordOutOfRange(uint64_t i) const {
  return Status::OutOfRange(path() + ": record " + std::to_string(i) + " of " +
                            std::to_string(record_count()))
      .WithLocation({path(), static_cast<int64_t>(i), -1});
}

std::string ShardReader::EntryProblem(const ShardIndexEntry& e) const {
  if (e.offset < kShardHeaderBytes || e.offset > footer_.index_offset ||
      e.stored_size > footer_.index_offset - e.offset) {
    return "payload [" + std::to_string(e.offset) + ", +" + std::to_string(e.stored_size) +
           ") outside the data region [64, " + std::to_string(footer_.index_offset) + ")";
  }
  if (e.offset % header_.record_alignment != 0) {
    return "payload offset " + std::to_string(e.offset) + " not aligned to " +
           std::to_string(header_.record_alignment);
  }
  if (header_.jpeg_records()) {
    // Section 4: a JPEG record decodes to its own image, at most max_side x max_side.
    if (e.codec != Codec::kJpeg) {
      return "codec " + std::to_string(static_cast<int>(e.codec)) +
             " in a shard of JPEG records (codec 2)";
    }
    if (e.raw_size == 0 || e.raw_size > header_.schema.sample_bytes() ||
        e.raw_size % header_.schema.channels != 0) {
      return "raw size " + std::to_string(e.raw_size) + " of a JPEG record is not a " +
             std::to_string(header_.schema.channels) + "-channel image of at most " +
             std::to_string(header_.jpeg_max_side) + "x" + std::to_string(header_.jpeg_max_side) +
             " pixels";
    }
  } else {
    if (e.raw_size != header_.schema.sample_bytes()) {
      return "raw size " + std::to_string(e.raw_size) + " differs from the schema's " +
             std::to_string(header_.schema.sample_bytes());
    }
    if (e.codec != Codec::kNone && e.codec != Codec::kZstd) {
      return e.codec == Codec::kJpeg
                 ? std::string("JPEG record in a shard without the JPEG-records flag")
                 : "unknown codec " + std::to_string(static_cast<int>(e.codec));
    }
  }
  if (e.codec == Codec::kNone && e.stored_size != e.raw_size) {
    return "uncompressed record of " + std::to_string(e.stored_size) + " bytes, expected " +
           std::to_string(e.raw_size);
  }
  if (uint64_t{e.key_offset} + e.key_size > footer_.keys_size) {
    return "key outside the keys section";
  }
  return "";
}

Status ShardReader::CheckRecord(uint64_t i) const {
  if (i >= record_count()) {
    return RecordOutOfRange(i);
  }
  const ShardIndexEntry e = entry(i);
  const std::string problem = EntryProblem(e);
  if (!problem.empty()) {
    return AtRecord(Status::Corruption("bad index entry: " + problem), i, EntryOffset(i));
  }
  const uint64_t computed = RecordChecksum(stored(e), e.stored_size, e.label);
  if (computed != e.checksum) {
    return AtRecord(Status::Corruption("checksum mismatch (stored " + FormatChecksum(e.checksum) +
                                       ", computed " + FormatChecksum(computed) + ")"),
                    i, e.offset);
  }
  return Status::Ok();
}

Status ShardReader::ReadRecord(uint64_t i, RecordDecoder* decoder, uint8_t* out,
                               int64_t* label) const {
  return ReadRecordFrom(i, nullptr, 0, decoder, out, label);
}

Status ShardReader::ReadRecordFrom(uint64_t i, const uint8_t* bytes, uint64_t size,
                                   RecordDecoder* decoder, uint8_t* out, int64_t* label) const {
  if (i >= record_count()) {
    return RecordOutOfRange(i);
  }
  const ShardIndexEntry e = entry(i);
  const std::string problem = EntryProblem(e);
  if (!problem.empty()) {
    return AtRecord(Status::Corruption("bad index entry: " + problem), i, EntryOffset(i));
  }
  if (bytes == nullptr) {  // ReadRecord: from the mapping
    bytes = stored(e);
  } else if (size != e.stored_size) {
    return Status::Corruption(RecordLocation(i, e.offset) + ": " + std::to_string(size) +
                              " stored bytes given, the index entry says " +
                              std::to_string(e.stored_size));
  }
  // One pass over a raw record: copy and checksum together (RecordDecoder::DecodeChecked).
  Status s =
      decoder->DecodeChecked(bytes, e.stored_size, e.codec, e.label, e.checksum, out, e.raw_size);
  if (!s.ok()) return AtRecord(s, i, e.offset);
  *label = e.label;
  return Status::Ok();
}

Status ShardReader::VerifyIndexChecksum() const {
  const uint64_t begin = footer_.index_offset;
  const uint64_t end = footer_.keys_offset + footer_.keys_size;
  const uint64_t computed = Xxh3(file_->data() + begin, end - begin);
  if (computed != footer_.index_checksum) {
    return Status::Corruption("index checksum mismatch (stored " +
                              FormatChecksum(footer_.index_checksum) + ", computed " +
                              FormatChecksum(computed) + ")")
        .WithLocation({path(), -1, static_cast<int64_t>(begin)},
                      path() + " (index at offset " + std::to_string(begin) + ")");
  }
  return Status::Ok();
}

Result<std::string_view> ShardReader::CheckedKey(uint64_t i) const {
  if (i >= record_count()) {
    return RecordOutOfRange(i);
  }
  const ShardIndexEntry e = entry(i);
  const std::string problem = EntryProblem(e);
  if (!problem.empty()) {
    return AtRecord(Status::Corruption("bad index entry: " + problem), i, EntryOffset(i));
  }
  std::call_once(index_checked_, [this] { index_status_ = VerifyIndexChecksum(); });
  if (!index_status_.ok()) {
    return AtRecord(Status::Corruption("key cannot be trusted: " + index_status_.message()), i,
                    EntryOffset(i));
  }
  return key(e);
}

}  // namespace kiln
