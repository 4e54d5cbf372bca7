// kiln::TFRecordReader: the records of one TFRecord file, in order, with both CRCs checked.
//
// A TFRecord file is a sequence of records, each framed as TensorFlow's RecordWriter writes it
// (tensorflow/core/lib/io/record_writer.cc; byte tables in tools/sources/pack_inputs.md, "TFRecord
// framing"):
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
//   `length` bytes of data        | uint32 masked CRC-32C of the data
// with MaskCrc32c (tools/sources/crc32c.h). A file compressed with gzip (TFRecordOptions
// compression GZIP) is read through zlib, found by its first two bytes (1f 8b) whatever its name;
// offsets are then offsets in the decompressed stream.
//
// What a damaged file gives (each a problem naming the record index and its byte offset):
//   - a data CRC that does not match: that record is bad, the next one is read (its length was
//     checked, so the framing is intact);
//   - a length CRC that does not match, or a file that ends inside a record: the framing cannot
//     be trusted from there, the rest of the file is not read;
//   - a length over kMaxTFRecordBytes (with a good length CRC): that record is refused without
//     allocating it and skipped; the next one is read.
//
// Thread safety: a TFRecordReader is used by one thread at a time; distinct readers are
// independent.
#ifndef KILN_TOOLS_SOURCES_TFRECORD_READER_H_
#define KILN_TOOLS_SOURCES_TFRECORD_READER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "formats/status.h"

namespace kiln {

// Bytes before a record's data (length + length CRC) and after it (data CRC).
inline constexpr uint64_t kTFRecordHeaderBytes = 12;
inline constexpr uint64_t kTFRecordFooterBytes = 4;
// The largest record data accepted: 1 GiB. TensorFlow's own limit is the protobuf's 2 GiB; an
// image record is far below either, and a larger length is a damaged or hostile file.
inline constexpr uint64_t kMaxTFRecordBytes = uint64_t{1} << 30;

// What one TFRecordReader::Next call found.
enum class TFRecordRead {
  kRecord,     // `data` holds the next record's data, both CRCs good
  kEnd,        // the file ends cleanly after the last record
  kBadRecord,  // this record is bad (`problem` says why); the next Next call reads on
  kBadStream,  // the rest of the file cannot be read (`problem` says why); Next returns kEnd
};

class TFRecordReader {
 public:
  // Opens `path` for reading. Errors: NotFound when it does not exist; IOError when it cannot
  // be opened (naming it and errno's message).
  static Result<std::unique_ptr<TFRecordReader>> Open(const std::string& path);
  ~TFRecordReader();
  TFRecordReader(const TFRecordReader&) = delete;
  TFRecordReader& operator=(const TFRecordReader&) = delete;

  // Reads the record at the current position into `data` and moves past it. On kBadRecord and
  // kBadStream, `problem` is "record I at byte offset N: REASON", e.g. "record 17 at byte offset
  // 123456: data CRC32C mismatch (stored 0x1234abcd, computed 0x0badf00d)". `data` is
  // undefined unless kRecord. Allocates at most what the file holds (a length field of 2^63 in
  // a short file allocates nothing).
  TFRecordRead Next(std::string* data, std::string* problem);

  // The index (from 0) and byte offset of the record the last Next call read (or tried to).
  uint64_t record_index() const { return record_index_; }
  uint64_t record_offset() const { return record_offset_; }

  // Moves to the record with index `index` that starts at byte `offset` (as a previous pass
  // found them), so that the next Next call reads it. A plain file seeks; a gzip file reads
  // forward (and starts again from the beginning to go back). Errors: IOError naming the file.
  Status Seek(uint64_t index, uint64_t offset);

  // True when the file is gzip-compressed.
  bool compressed() const;

 private:
  struct File;
  explicit TFRecordReader(std::string path, std::unique_ptr<File> file);
  // Reads up to `n` bytes into `out` (appending); returns the count read (short at the end).
  Result<uint64_t> ReadSome(uint64_t n, std::string* out);
  TFRecordRead Damaged(TFRecordRead kind, const std::string& reason, std::string* problem);

  std::string path_;
  std::unique_ptr<File> file_;
  uint64_t position_ = 0;      // byte offset of the next read (decompressed for gzip)
  uint64_t next_index_ = 0;    // index of the record at position_
  uint64_t record_index_ = 0;  // the record the last Next call read
  uint64_t record_offset_ = 0;
  bool broken_ = false;  // after kBadStream
};

}  // namespace kiln

#endif  // KILN_TOOLS_SOURCES_TFRECORD_READER_H_
