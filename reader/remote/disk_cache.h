// kiln::remote::DiskCache: a local directory holding the bytes of a remote dataset's shards,
// downloaded once, so that later epochs (and later jobs on the same node) read them from local
// disk instead of the network (reader/remote/disk_cache.md: the policy, the files byte by byte,
// and what several processes sharing one directory do).
//
//   std::shared_ptr<DiskCache> cache =
//       *DiskCache::Open({"/scratch/kiln-cache", 200ull << 30}, "s3://bucket/ds", objects);
//   cache->StartFill(remote_options);          // a thread downloads pieces until full
//   if (cache->Read(object, offset, length, dest)) { /* served locally */ }
//
// Policy: an object is cached in pieces of `piece_bytes` (4 MiB; the last one of an object is
// shorter). A fill thread downloads the pieces not yet held, in dataset order (objects as the
// manifest lists them, pieces by offset), while the directory's usage stays within
// `capacity_bytes`; once full, it admits nothing more and evicts nothing of the dataset being
// read. Training reads every sample once an epoch, in a new order each time: a cyclic scan,
// for which LRU (evict the least recently used piece) evicts each piece just before it is
// needed again and hits nothing once the dataset is larger than the cache, whereas keeping a
// fixed part resident hits that part every epoch: capacity / dataset of the bytes, the most any
// policy can keep for a cyclic scan (Belady, "A study of replacement algorithms for a
// virtual-storage computer", IBM Systems Journal 5(2), 1966: the optimal policy evicts the page
// used farthest in the future, which for a cyclic scan gives the same hit rate).
//
// Eviction: only of what a DiskCache made, and never of a dataset in use. Every file lives
// under DIR/kiln-remote-cache/ENTRY/ (ENTRY: the XXH3-64 of the dataset's URL), with names of
// its own; nothing else in DIR is read, counted or removed. A piece whose object changed on the
// server (another size or ETag than the index file recorded) is dropped when the fill thread
// starts. When the directory is full and the dataset read is not all held, whole entries of
// other datasets that no process has open are removed, least recently opened first.
//
// Several processes (the ranks of one node) may share DIR: each reads every piece any of them
// has stored (the index files are shared mappings), one of them at a time fills (an flock on the
// entry's fill.lock; another takes over when it exits). A piece is marked held only after its
// bytes are written and flushed (fdatasync), so a crash never leaves a marked piece unwritten.
//
// Thread safety: Read from any thread; StartFill once. Lifetime: the fill thread stops and
// joins in the destructor; in a forked child (which has no copy of the thread) the cache must
// never be destroyed (the Loader leaks its references there, as it does its BlockCache).
#ifndef KILN_READER_REMOTE_DISK_CACHE_H_
#define KILN_READER_REMOTE_DISK_CACHE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "formats/status.h"
#include "reader/range_reader.h"

namespace kiln::remote {

struct ObjectInfo;
struct RemoteOptions;

class DiskCache {
 public:
  static constexpr uint64_t kDefaultPieceBytes = 4 << 20;
  struct Options {
    std::string dir;              // created when missing (its parents must exist)
    uint64_t capacity_bytes = 0;  // bytes of pieces held in the directory, all datasets; 0: as
                                  // much as the file system allows (see free_reserve_bytes)
    uint64_t piece_bytes = kDefaultPieceBytes;  // a power of two in [4 KiB, 1 GiB]
    // The fill stops while the file system has less than this many bytes free (default 1 GiB,
    // or 5% of the file system when that is smaller): the cache never fills the disk.
    int64_t free_reserve_bytes = -1;
  };
  // Counters since Open, of this process.
  struct Stats {
    uint64_t reads = 0;         // Read calls served from the cache
    uint64_t bytes = 0;         // their bytes
    uint64_t pieces_held = 0;   // pieces of this dataset held now (any process stored them)
    uint64_t pieces_total = 0;  // pieces of this dataset
    uint64_t fill_pieces = 0;   // pieces this process downloaded and stored
    uint64_t fill_bytes = 0;
    uint64_t evicted_entries = 0;  // other datasets' entries removed to make room
    bool fill_done = false;        // the fill thread has ended (or waits: another process fills)
    std::string fill_error;        // why the fill stopped early ("" if it did not)
  };

  // Opens (creating what is missing) the cache entry of the dataset at `dataset_url`, whose
  // data files are `objects` (URL, size, ETag as the open saw them), under options.dir.
  // Errors: InvalidArgument for a bad piece size or an empty dir; IOError naming the path when
  // the directory or its files cannot be made, opened or mapped (a read-only directory, no
  // space for the index files). A damaged or foreign index file is not an error: the fill
  // thread rewrites it (and the object's pieces are read from the network until then).
  static Result<std::shared_ptr<DiskCache>> Open(const Options& options,
                                                 const std::string& dataset_url,
                                                 const std::vector<ObjectInfo>& objects);
  ~DiskCache();
  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  // Copies [offset, offset + length) of `object` (one of the objects given to Open, by URL and
  // ETag) into `dest` and returns true when every piece the range touches is held; false (dest
  // untouched or partly written) otherwise, and the caller reads the network. A local read
  // error is a miss too (counted in read_errors()). Never blocks on the network.
  bool Read(const ObjectInfo& object, uint64_t offset, uint64_t length, uint8_t* dest);

  // Starts the fill thread: its own RemoteClient (from `options`, which must not name this
  // cache), up to `in_flight` piece GETs at once. Does nothing after the first call.
  void StartFill(const RemoteOptions& options, uint32_t in_flight = 2);
  // Waits until the fill thread has nothing more to do (every piece held, the directory full,
  // or an error) or `timeout_ms` passed; true when it finished. For tests and tools.
  bool WaitFilled(int64_t timeout_ms);

  // Stores one piece (its whole length: min(piece_bytes, object size - piece offset)) and marks
  // it held after flushing it. What the fill thread does with each download; public for tests.
  // Errors: IOError naming the file and offset; InvalidArgument when this process does not hold
  // the entry's fill lock (TryLockFill) or the piece does not fit.
  Status StorePiece(uint32_t object, uint64_t piece, const uint8_t* bytes, uint64_t length);
  // Takes the entry's fill lock if no process holds it; true when this process holds it. The
  // holder checks every index against the objects (resetting those that changed). For tests.
  bool TryLockFill();

  // A record read from [offset, offset + length) of object `object` (its index in Open's list)
  // failed its checksum: the pieces it touches that the cache holds are marked not held (the
  // next fill downloads them again) and the object file's path is returned; "" when the cache
  // held none of them (the bytes came from the network). From any thread.
  std::string DropDamaged(uint32_t object, uint64_t offset, uint64_t length);

  Stats stats() const;
  // The fill thread's request counters since StartFill (its GETs are network traffic of this
  // process too: the Loader adds them to LoaderStats::requests).
  RequestStats fill_requests() const;
  uint64_t read_errors() const { return read_errors_.load(std::memory_order_relaxed); }
  // The entry's directory (DIR/kiln-remote-cache/ENTRY).
  const std::string& entry_dir() const { return entry_dir_; }
  uint64_t piece_bytes() const { return piece_bytes_; }
  // Bytes of pieces held in the whole directory (every entry), as the index files say.
  uint64_t DirectoryUsage() const;

  struct Object;  // one object's index mapping and data file (disk_cache.cc)

 private:
  DiskCache() = default;
  void Fill(RemoteOptions options, uint32_t in_flight);
  bool MakeRoom(uint64_t need);
  bool HasRoom(uint64_t need) const;

  Options options_;
  std::string root_;       // DIR/kiln-remote-cache
  std::string entry_dir_;  // root_/ENTRY
  uint64_t piece_bytes_ = kDefaultPieceBytes;
  std::vector<std::unique_ptr<Object>> objects_;
  std::unordered_map<std::string, uint32_t> by_url_;
  int use_fd_ = -1;   // use.lock, held shared while open
  int fill_fd_ = -1;  // fill.lock, held exclusive by the filling process
  std::atomic<bool> fill_locked_{false};
  std::atomic<uint64_t> reads_{0}, bytes_{0}, read_errors_{0};
  mutable std::mutex mu_;  // guards the fill counters and state below
  std::condition_variable cv_;
  uint64_t fill_pieces_ = 0, fill_bytes_ = 0, evicted_entries_ = 0;
  std::string fill_error_;
  RequestStats fill_requests_;
  bool fill_started_ = false, fill_done_ = false, stop_ = false;
  bool fill_waits_ = false;  // another process holds fill.lock
  std::thread fill_thread_;
  // The fill thread's count of the directory's bytes (HasRoom).
  mutable uint64_t usage_ = 0;
  mutable int64_t usage_scanned_ms_ = -1;
};

}  // namespace kiln::remote

#endif  // KILN_READER_REMOTE_DISK_CACHE_H_
