// kiln::MappedFile: a whole file mapped read-only into memory, unmapped on destruction.
//
// Ownership: the MappedFile owns the mapping; views into data() stay valid until it is
// destroyed. A file that another process truncates while mapped makes later reads of the lost
// pages raise SIGBUS: kiln checks sizes at open (ShardReader) and documents this limitation.
// Thread safety: const methods are safe from any thread.
#ifndef KILN_FORMATS_MAPPED_FILE_H_
#define KILN_FORMATS_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "formats/status.h"

namespace kiln {

// A run of bytes inside a MappedFile's mapping (or empty: data nullptr, size 0). Valid while the
// MappedFile lives. Reading `data` faults like any mapped read (see MappedReadFaultScope).
struct MappedRange {
  const uint8_t* data = nullptr;
  uint64_t size = 0;  // bytes
  bool empty() const { return size == 0; }
};

// Asks the kernel to start reading the pages that hold `range` into the page cache and returns
// at once (madvise(MADV_WILLNEED) over the range rounded out to whole pages; the kernel reads
// asynchronously, with no page past the file's current end). Never touches the bytes, so it
// never faults, even on a file truncated or unlinked since it was mapped. Best effort: errors
// are ignored. Cost: one system call (about 1 us when the pages are already resident).
// Thread safety: any thread.
void AdviseWillNeed(MappedRange range);

// True when the first `max_pages` (1 to 256) pages holding `range` are all resident in the page
// cache (mincore); an empty range is resident; false when mincore fails. Never touches the
// bytes, so never faults. One system call. Thread safety: any thread.
bool IsResident(MappedRange range, uint32_t max_pages = 64);

// How a mapping will be read, for the kernel (madvise). Besides fault read-around, RANDOM and
// SEQUENTIAL also make page reclaim ignore this mapping's recent accesses (Linux 6.3 and later:
// vma_has_recency), so pages read once through it do not crowd out pages read ahead but not
// yet used, which is what a dataset larger than memory needs.
enum class AccessAdvice {
  kNormal,      // the kernel's default: read around each fault (read_ahead_kb)
  kRandom,      // no read-around: a fault reads only its page
  kSequential,  // aggressive read-ahead after each fault
};

class MappedFile {
 public:
  // Maps `path` read-only. An empty file maps to size() == 0 and data() == nullptr.
  // Errors: NotFound, IOError naming the path and the system's reason.
  static Result<std::unique_ptr<MappedFile>> Open(const std::string& path);

  // An anonymous private mapping of `size` bytes standing in for a file named `name` whose bytes
  // are not local (a shard at a URL, reader/remote/remote_dataset.h): it reads as zeros except
  // where its creator wrote through mutable_data() before sharing it, and pages never written
  // take no memory (MAP_NORESERVE), so a multi-GiB shard costs only the sections fetched.
  // An empty size maps to size() == 0 and data() == nullptr. Errors: IOError naming `name`.
  static Result<std::unique_ptr<MappedFile>> Anonymous(std::string name, uint64_t size);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }  // bytes
  const std::string& path() const { return path_; }
  // The writable bytes of an Anonymous mapping, for its creator to fill before it shares the
  // mapping; nullptr for a file mapping. Not thread-safe against readers of the same bytes.
  uint8_t* mutable_data() const { return anonymous_ ? const_cast<uint8_t*>(data_) : nullptr; }
  // True for an Anonymous mapping.
  bool anonymous() const { return anonymous_; }

  // Hints the kernel that the whole file will be read soon (madvise WILLNEED). Best effort.
  void AdviseWillNeed() const;
  // Hints random access (madvise RANDOM): no read-ahead past the touched pages. Best effort.
  void AdviseRandom() const;
  // Sets the whole mapping's access advice (madvise NORMAL, RANDOM or SEQUENTIAL; see
  // AccessAdvice). Best effort. Thread safety: any thread; the last call wins.
  void Advise(AccessAdvice advice) const;

  // Returns the part of [offset, offset + bytes) that lies inside the file as mapped at open:
  // {data() + offset, min(bytes, size() - offset)}, or an empty range when offset >= size().
  MappedRange RangeAt(uint64_t offset, uint64_t bytes) const;

 private:
  MappedFile(std::string path, const uint8_t* data, uint64_t size, bool anonymous = false)
      : path_(std::move(path)), data_(data), size_(size), anonymous_(anonymous) {}

  std::string path_;
  const uint8_t* data_;
  uint64_t size_;
  bool anonymous_;
};

}  // namespace kiln

#endif  // KILN_FORMATS_MAPPED_FILE_H_
