// kiln::ShardWriter: writes one shard file (formats/shards/shard_format.md) record by record.
//
// The file is written under `<path>.tmp` and renamed to `path` by Finish() only after the index,
// keys and footer are written and the data is flushed to disk (fsync): a shard that exists under
// its final name is complete. Destroying an unfinished writer removes the temporary file.
// Thread safety: none; one thread drives a writer.
#ifndef KILN_FORMATS_SHARD_WRITER_H_
#define KILN_FORMATS_SHARD_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/data_file_info.h"
#include "formats/record_codec.h"
#include "formats/shards/shard_format.h"
#include "formats/status.h"

namespace kiln {

class ShardWriter {
 public:
  // Creates `<path>.tmp` (truncating any leftover) and writes the header.
  // Errors: IOError naming the path (permission, no space, ...), InvalidArgument for a bad header.
  static Result<std::unique_ptr<ShardWriter>> Create(const std::string& path,
                                                     const ShardHeader& header);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends one record at the next aligned offset. `record.raw_size` must equal the schema's
  // sample bytes. Errors: IOError naming the path; InvalidArgument for a key over 65535 bytes.
  Status Add(const EncodedRecord& record);

  // Returns the size the file would have if Finish() were called after adding a record of
  // `stored_bytes` with a key of `key_bytes`. Used to keep shards under --shard-size.
  uint64_t ProjectedBytes(uint64_t stored_bytes, uint64_t key_bytes) const;
  // Returns the size the file would have if Finish() were called now.
  uint64_t FinishedBytes() const;
  uint64_t record_count() const { return entries_.size(); }

  // Writes index, keys and footer, fsyncs, closes and renames to the final path. `file` in the
  // result is the final path's base name. Errors: IOError naming the path.
  Result<DataFileInfo> Finish();

 private:
  ShardWriter(std::string path, int fd, const ShardHeader& header);
  Status Write(const uint8_t* data, size_t size);  // buffered, hashes as it goes
  Status Flush();

  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  ShardHeader header_;
  uint64_t offset_ = 0;  // bytes written so far (buffered included)
  std::vector<uint8_t> buffer_;
  std::vector<ShardIndexEntry> entries_;
  std::string keys_;
  void* hash_state_ = nullptr;  // XXH3_state_t*, whole-file hash, owned
  bool finished_ = false;
};

}  // namespace kiln

#endif  // KILN_FORMATS_SHARD_WRITER_H_
