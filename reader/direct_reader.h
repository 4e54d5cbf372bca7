// kiln::DirectFiles, kiln::DirectQueue and kiln::UringRangeReader: reading a dataset's records
// from its files without the page cache, for data larger than memory (LoaderOptions::io,
// reader/loader.h).
//
//   DirectFiles       the dataset's data files (Dataset::data_file_count), each opened once
//                     more with O_DIRECT, and the alignment the kernel requires of direct reads
//   DirectQueue       one fetch thread's io_uring (liburing) with `depth` aligned staging
//                     buffers: up to `depth` reads in flight, each into its own buffer
//   UringRangeReader  the two as the fetch thread's RangeReader (reader/range_reader.h)
//
// A direct read must start at an offset and have a length that are multiples of the file's
// alignment (the device's logical block size: statx STATX_DIOALIGN where the kernel reports it,
// 4096 otherwise), into memory with the same alignment. A record starts at any 64-byte boundary
// (formats/shards/shard_format.md), so the loader reads the aligned range that covers it into a
// staging buffer and checks and decodes the record from there (Dataset::DecodeStored): one copy,
// the same one the mapped path makes, and the same checksum over the same bytes.
//
// Where the filesystem refuses O_DIRECT (tmpfs, some FUSE and network filesystems) a file is
// opened buffered instead (direct() false): reads then go through the page cache, still
// asynchronously. Where io_uring is unavailable (no liburing at build time, a kernel before
// 5.1, io_uring disabled by sysctl or refused by a seccomp filter: io_uring_queue_init returning
// -ENOSYS or -EPERM), DirectQueue::Create returns NotSupported and the loader reads through the
// mappings (DirectIoAvailable says why, once per process).
//
// Memory: a DirectQueue holds depth * buffer_bytes of page-aligned host memory and its ring
// (a few KiB); DirectFiles holds one descriptor per data file.
// Thread safety: DirectFiles is immutable after Open (any thread). A DirectQueue belongs to one
// thread at a time.
#ifndef KILN_READER_DIRECT_READER_H_
#define KILN_READER_DIRECT_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/status.h"
#include "reader/range_reader.h"

namespace kiln {

// True when this process can create an io_uring (probed once per process with a one-entry ring
// and cached); otherwise false with the reason in `*reason` ("kiln was built without liburing",
// "io_uring_queue_init: Operation not permitted", ...). Thread safety: any thread.
bool DirectIoAvailable(std::string* reason = nullptr);

// Returns the memory this process may use, in bytes: the smaller of the machine's RAM
// (MemTotal in /proc/meminfo) and the memory limit of its cgroup (v1 memory.limit_in_bytes, v2
// memory.max, found through /proc/self/cgroup; "max" or an unreadable file means no limit).
// The page cache of a dataset counts against the same limit. Never fails: 0 when even
// /proc/meminfo cannot be read. Thread safety: any thread.
uint64_t MemoryLimitBytes();

class DirectFiles {
 public:
  // Opens each of `dataset`'s data files read-only with O_DIRECT (buffered where the filesystem
  // refuses O_DIRECT with EINVAL) and queries its direct-I/O alignment. The Dataset must stay
  // open: its files are already validated, so a file here is the one it mapped unless it was
  // replaced in between (reads are checksummed either way).
  // Errors: NotSupported when the backend has no direct reads (data_file_count() 0: LMDB);
  // NotFound / IOError naming the file when it cannot be opened.
  static Result<std::unique_ptr<DirectFiles>> Open(const Dataset& dataset);
  ~DirectFiles();
  DirectFiles(const DirectFiles&) = delete;
  DirectFiles& operator=(const DirectFiles&) = delete;

  uint32_t count() const { return static_cast<uint32_t>(files_.size()); }
  int fd(uint32_t file) const { return files_[file].fd; }
  // Bytes that the offset, length and memory of a read of `file` must be multiples of: a power
  // of two in [512, 4096] for O_DIRECT files (the file's STATX_DIOALIGN offset and memory
  // alignments, the larger of the two; 4096 where statx does not report them), 1 for buffered.
  uint32_t alignment(uint32_t file) const { return files_[file].alignment; }
  bool direct(uint32_t file) const { return files_[file].direct; }
  // True when every file was opened with O_DIRECT.
  bool all_direct() const { return all_direct_; }
  // The largest alignment over the files (1 when none is direct).
  uint32_t max_alignment() const { return max_alignment_; }
  const std::string& path(uint32_t file) const { return files_[file].path; }

 private:
  struct File {
    int fd = -1;
    uint32_t alignment = 1;
    bool direct = false;
    std::string path;
  };
  DirectFiles() = default;
  std::vector<File> files_;
  bool all_direct_ = true;
  uint32_t max_alignment_ = 1;
};

class DirectQueue {
 public:
  // A ring of `depth` entries (1 to 4096) and `depth` staging buffers of `buffer_bytes` each
  // (rounded up to 4096), 4096-aligned. Errors: NotSupported when io_uring is unavailable
  // (DirectIoAvailable's reason); OutOfRange when the buffers cannot be allocated;
  // InvalidArgument for a depth or size out of range.
  static Result<std::unique_ptr<DirectQueue>> Create(uint32_t depth, uint64_t buffer_bytes);
  ~DirectQueue();
  DirectQueue(const DirectQueue&) = delete;
  DirectQueue& operator=(const DirectQueue&) = delete;

  uint32_t depth() const { return depth_; }
  uint64_t buffer_bytes() const { return buffer_bytes_; }
  // Staging buffer `buffer` (< depth()): buffer_bytes() bytes, 4096-aligned, valid while the
  // queue lives. Its contents are those of the last read completed into it.
  uint8_t* buffer(uint32_t buffer) const { return memory_ + uint64_t{buffer} * buffer_bytes_; }

  // Queues a read of `length` bytes (<= buffer_bytes()) at `offset` of `fd` into staging buffer
  // `buffer`, to be reported by Wait() with `buffer` as its identity. The caller keeps at most
  // one read per buffer in flight, so at most depth() reads. Nothing reaches the kernel until
  // Submit(). Never fails (the ring has depth() entries).
  void Queue(uint32_t buffer, int fd, uint64_t offset, uint32_t length);
  // Hands the queued reads to the kernel (one io_uring_submit). Errors: IOError naming errno.
  Status Submit();
  // Blocks until one read finishes; sets `*buffer` to its staging buffer and `*result` to the
  // bytes read (short at the end of the file) or -errno. Requires a read in flight.
  // Errors: IOError when waiting itself fails (not the read: that is `*result`).
  Status Wait(uint32_t* buffer, int64_t* result);
  // Reads in flight (queued or submitted, not yet returned by Wait).
  uint32_t in_flight() const { return in_flight_; }

 private:
  DirectQueue() = default;
  struct Ring;
  std::unique_ptr<Ring> ring_;
  uint8_t* memory_ = nullptr;  // depth_ * buffer_bytes_, owned (munmap)
  uint64_t memory_bytes_ = 0;
  uint32_t depth_ = 0;
  uint64_t buffer_bytes_ = 0;
  uint32_t in_flight_ = 0;
};

// A RangeReader over local files: objects are `files`' files (shared: the files outlive the
// reader), reads go through `queue` (owned). Thread safety: that of the queue, one thread.
class UringRangeReader : public RangeReader {
 public:
  UringRangeReader(const DirectFiles& files, std::unique_ptr<DirectQueue> queue)
      : files_(files), queue_(std::move(queue)) {}
  // Leaves the queue alive (for a forked child's Loader, whose reads in flight were issued by
  // the parent's threads: waiting for them could wait forever).
  void Abandon() override { (void)queue_.release(); }

  const std::string& object_name(uint32_t object) const override { return files_.path(object); }
  uint32_t alignment(uint32_t object) const override { return files_.alignment(object); }
  uint32_t depth() const override { return queue_->depth(); }
  uint64_t buffer_bytes() const override { return queue_->buffer_bytes(); }
  uint8_t* buffer(uint32_t buffer) const override { return queue_->buffer(buffer); }
  void Queue(uint32_t buffer, uint32_t object, uint64_t offset, uint32_t length) override {
    queue_->Queue(buffer, files_.fd(object), offset, length);
  }
  Status Submit() override { return queue_->Submit(); }
  Status Wait(uint32_t* buffer, int64_t* result) override { return queue_->Wait(buffer, result); }
  uint32_t in_flight() const override { return queue_->in_flight(); }

 private:
  const DirectFiles& files_;
  std::unique_ptr<DirectQueue> queue_;
};

}  // namespace kiln

#endif  // KILN_READER_DIRECT_READER_H_
