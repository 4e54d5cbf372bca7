// kiln::ShardWriter: writes one shard file (formats/shards/shard_format.md) record by record.
//
// The file is written under `<path>.tmp` and renamed to `path` by Finish() only after the index,
// keys and footer are written and the data is flushed to disk (fsync): a shard that exists under
// its final name is complete. Destroying an unfinished writer removes the temporary file.
//
// Writing: bytes are gathered in 4 MiB buffers, and each full buffer goes to the file on the
// writer's own I/O thread while the caller fills the other one, so the caller (the converter's
// ordered write stage) does not wait for the disk (where no thread can be started, RLIMIT_NPROC,
// the buffers are written on the caller's thread). The file is opened with O_DIRECT where the
// filesystem allows it (ext4, xfs, btrfs ...; not tmpfs on older kernels): the 4 KiB-aligned
// buffers go to the disk without being copied into the page cache, which is what writing a
// large dataset cost most (BENCHMARKS.md, "Converter: the tile pack against a fair bound").
// The last piece of a file (a length that is not a multiple of 4 KiB) is written without
// O_DIRECT. Where O_DIRECT is refused, at open or at the first write (EINVAL), the file is
// written through the page cache as before; the bytes on disk are the same either way. A
// consequence: a shard just written is not in the page cache, so the first read of it comes
// from the disk.
// Thread safety: none; one thread drives a writer (its I/O thread is internal).
#ifndef KILN_FORMATS_SHARD_WRITER_H_
#define KILN_FORMATS_SHARD_WRITER_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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
  ShardWriter(std::string path, int fd, bool direct, const ShardHeader& header);
  Status Write(const uint8_t* data, size_t size);  // buffered, hashes as it goes
  // Hands the full current buffer to the I/O thread (after the previous one is written) and
  // switches to the other buffer. Returns the I/O thread's first error, if any.
  Status Submit();
  // Waits until the I/O thread has written everything handed to it; returns its first error.
  Status WaitIdle();
  void IoLoop();
  // Writes `size` bytes at the end of the file: O_DIRECT when `direct_` and the size is a
  // multiple of kDirectAlignment, falling back to the page cache when O_DIRECT is refused.
  Status WriteOut(const uint8_t* data, size_t size);

  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  ShardHeader header_;
  uint64_t offset_ = 0;  // bytes written so far (buffered included)
  bool direct_ = false;  // fd_ has O_DIRECT (touched by the I/O thread while it writes)
  struct AlignedFree {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, AlignedFree> buffers_[2];
  int current_ = 0;    // the buffer Write() fills
  size_t filled_ = 0;  // bytes in buffers_[current_]
  std::mutex mu_;
  std::condition_variable cv_;
  const uint8_t* pending_ = nullptr;  // guarded by mu_: a buffer for the I/O thread to write
  size_t pending_size_ = 0;           // guarded by mu_
  bool busy_ = false;                 // guarded by mu_: pending_ set or being written
  bool stop_ = false;                 // guarded by mu_
  Status io_status_;                  // guarded by mu_: the I/O thread's first error
  std::thread io_thread_;
  std::vector<ShardIndexEntry> entries_;
  std::string keys_;
  void* hash_state_ = nullptr;  // XXH3_state_t*, whole-file hash, owned
  bool finished_ = false;
};

}  // namespace kiln

#endif  // KILN_FORMATS_SHARD_WRITER_H_
