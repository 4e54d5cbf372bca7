// kiln::ShardReader: one shard file, mapped read-only, with its header and footer validated.
//
// Open() costs O(1) in the number of records: it checks the header, the footer and the index
// bounds against the file size, and nothing per record. Each record's own bounds are checked
// when it is read (EntryProblem, CheckRecord), and its content by the record checksum.
// Lifetimes: pointers and string_views returned by a ShardReader stay valid until it is
// destroyed. Thread safety: every method is const and safe to call from many threads at once.
#ifndef KILN_FORMATS_SHARD_READER_H_
#define KILN_FORMATS_SHARD_READER_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "formats/mapped_file.h"
#include "formats/record_codec.h"
#include "formats/shards/shard_format.h"
#include "formats/status.h"

namespace kiln {

class ShardReader {
 public:
  // Maps and validates `path`. Errors (each message starts with the path): NotFound, IOError,
  // Corruption ("file of N bytes is too small to be a shard", "bad magic", "no footer magic
  // (incomplete or truncated shard)", checksum and bounds failures), NotSupported (version).
  static Result<std::unique_ptr<ShardReader>> Open(const std::string& path);
  // Validates `file` (a mapping of a whole shard, possibly MappedFile::Anonymous with only its
  // header, index, keys and footer filled in: then records are read with ReadRecordFrom, never
  // from the mapping) as Open(path) does, naming file->path() in errors.
  static Result<std::unique_ptr<ShardReader>> Open(std::shared_ptr<const MappedFile> file);

  const std::string& path() const { return file_->path(); }
  const ShardHeader& header() const { return header_; }
  const ShardFooter& footer() const { return footer_; }
  uint64_t record_count() const { return footer_.record_count; }
  uint64_t file_bytes() const { return file_->size(); }
  const MappedFile& file() const { return *file_; }

  // Returns record `i`'s index entry, decoded from the mapping (40 bytes, no allocation).
  // Requires i < record_count().
  ShardIndexEntry entry(uint64_t i) const {
    return DecodeShardIndexEntry(file_->data() + footer_.index_offset + i * kShardIndexEntryBytes);
  }
  // Checks an index entry against the file: payload inside the data region and aligned, raw
  // size equal to the schema's, known codec, key inside the keys section. Returns "" when the
  // entry is sound, otherwise the reason (without location; see RecordLocation).
  std::string EntryProblem(const ShardIndexEntry& e) const;
  // Returns the byte offset of record `i`'s index entry in the file.
  uint64_t EntryOffset(uint64_t i) const {
    return footer_.index_offset + i * kShardIndexEntryBytes;
  }
  // Checks entry `i` and its checksum over the stored bytes: O(stored size).
  // Errors: Corruption naming path, record and offset.
  Status CheckRecord(uint64_t i) const;
  // Returns record `i`'s stored bytes. Requires EntryProblem(e) to be empty.
  const uint8_t* stored(const ShardIndexEntry& e) const { return file_->data() + e.offset; }
  // Returns record `i`'s key. Requires EntryProblem(e) to be empty.
  std::string_view key(const ShardIndexEntry& e) const {
    return {reinterpret_cast<const char*>(file_->data() + footer_.keys_offset + e.key_offset),
            e.key_size};
  }

  // Returns record `i`'s key after checking its entry and, on the first call for this shard, the
  // footer's index checksum (keys have no per-record checksum, shard_format.md section 4): a
  // damaged key is never returned. O(records) once per shard, O(1) after; thread-safe.
  // Errors: OutOfRange; Corruption naming path, record and entry offset.
  Result<std::string_view> CheckedKey(uint64_t i) const;

  // Checks entry and checksum of record `i`, then decodes its raw_size bytes into `out` and
  // stores its label in `*label`. Errors: OutOfRange; Corruption naming path, record and offset
  // ("checksum mismatch", bounds, zstd).
  Status ReadRecord(uint64_t i, RecordDecoder* decoder, uint8_t* out, int64_t* label) const;
  // ReadRecord with the record's stored bytes taken from `stored` (`size` bytes the caller read
  // from the file at the entry's offset) instead of the mapping: the same checks, the same
  // errors, and Corruption when `size` differs from the entry's stored size.
  Status ReadRecordFrom(uint64_t i, const uint8_t* stored, uint64_t size, RecordDecoder* decoder,
                        uint8_t* out, int64_t* label) const;

  // Checks the footer's index checksum over the whole index and keys sections: O(records).
  // Errors: Corruption naming the path and the index offset.
  Status VerifyIndexChecksum() const;

  // Returns "<path> record <i> (offset <offset>)", the prefix of every per-record message.
  std::string RecordLocation(uint64_t i, uint64_t offset) const;
  // Returns `status` located at record `i`, byte `offset` of this shard: its message prefixed
  // with RecordLocation(i, offset) and its location() fields set to the same place.
  Status AtRecord(const Status& status, uint64_t i, uint64_t offset) const;

  // Every error above carries its place in Status::location() as well as in its message: the
  // path; the record for per-record errors; the byte offset (the record's payload for checksum
  // and decode errors, its index entry for bad entries and keys, the index section for the index
  // checksum, 0 for the header, the footer's start for footer and too-small errors).

 private:
  Status RecordOutOfRange(uint64_t i) const;

  ShardReader(std::shared_ptr<const MappedFile> file, ShardHeader header, ShardFooter footer)
      : file_(std::move(file)), header_(header), footer_(footer) {}

  std::shared_ptr<const MappedFile> file_;  // shared with the verifier's whole-file hash
  ShardHeader header_;
  ShardFooter footer_;
  // VerifyIndexChecksum's result, computed by the first CheckedKey call.
  mutable std::once_flag index_checked_;
  mutable Status index_status_;
};

}  // namespace kiln

#endif  // KILN_FORMATS_SHARD_READER_H_
