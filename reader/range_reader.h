// kiln::RangeReader: the one place a fetch thread gets bytes of a dataset's files that it does
// not read through a mapping: "read this byte range of this object into this staging buffer,
// asynchronously, and tell me when it is done and how it ended". The design (contract, buffer
// ownership, O_DIRECT alignment, completion model, errors, and how a remote driver plugs in) is
// reader/loader.md, "The read path".
//
//   UringRangeReader (reader/direct_reader.h)          local files, O_DIRECT through one io_uring
//   RemoteStore::NewRangeReader (reader/remote/)        S3 / HTTP(S) range GETs on curl_multi
//
// The mmap path (IoMode::kMmap) does not use it: it decodes each record in place from the
// file mapping (Dataset::ReadSample), one copy, with page faults doing the I/O and madvise
// doing the read-ahead; a RangeReader over a mapping would add a copy per record.
//
// Objects are a dataset's data files, numbered as Dataset::StoredLocation::file numbers them
// (0 to Dataset::data_file_count() - 1). Staging buffers belong to the reader: depth() of them,
// buffer_bytes() each, aligned to alignment() of every object; a read names the buffer it fills
// and the caller keeps at most one read per buffer in flight.
// Ownership: the reader owns its buffers and its connection to the objects (descriptors, a
// ring, sockets); the objects' list belongs to what created it.
// Thread safety: one fetch thread uses a reader at a time; readers of different threads share
// nothing mutable.
#ifndef KILN_READER_RANGE_READER_H_
#define KILN_READER_RANGE_READER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/status.h"

namespace kiln {

// Counters of a reader's requests (remote drivers; local readers count none), in constant
// memory: latencies go to a histogram of quarter-octave buckets (bucket b holds attempts of
// [2^(b/4), 2^((b+1)/4)) microseconds, the last one everything longer), so a quantile is exact
// to within 19%. Latency is per attempt that ended, from first byte sent to last byte received
// (a hedged read's request that lost the race is cancelled and not counted).
struct RequestStats {
  static constexpr size_t kLatencyBuckets = 112;  // up to 2^28 us (about 4.5 minutes)
  uint64_t requests = 0;                          // attempts sent, retries included
  uint64_t bytes = 0;                             // body bytes received
  uint64_t retries = 0;
  uint64_t failures = 0;  // reads that completed with an error
  // Hedged requests (reader/remote/remote.md, "Hedged requests"): second requests sent for
  // reads that ran past the hedging threshold (counted in `requests` too), and of those the
  // reads that the second request finished first.
  uint64_t hedges = 0;
  uint64_t hedge_wins = 0;
  // Reads served from the local cache of a remote dataset (reader/remote/disk_cache.h) instead
  // of a request, and their bytes (in neither `requests` nor `bytes`).
  uint64_t cache_reads = 0;
  uint64_t cache_bytes = 0;
  std::array<uint64_t, kLatencyBuckets> latency{};

  // Counts one attempt that took `us` microseconds.
  void AddLatencyUs(int64_t us);
  // The `q`-quantile (0..1) of the latencies in microseconds (the upper bound of its bucket);
  // 0 when there are none.
  int64_t LatencyQuantileUs(double q) const;
  uint64_t attempts() const;  // latencies recorded
  void Add(const RequestStats& other);
  // This minus `earlier` (a snapshot of the same counters taken before).
  RequestStats Since(const RequestStats& earlier) const;
};

class RangeReader {
 public:
  virtual ~RangeReader() = default;

  // The name errors give object `object` (a path; a URL for a remote driver).
  virtual const std::string& object_name(uint32_t object) const = 0;
  // Bytes that the offset and length of a read of `object` must be multiples of: the file's
  // direct-I/O alignment (a power of two in [512, 4096]) for O_DIRECT, 1 where any range is
  // allowed (buffered files, remote objects).
  virtual uint32_t alignment(uint32_t object) const = 0;
  // Staging buffers: depth() of buffer_bytes() each, valid while the reader lives; a buffer's
  // contents are those of the last read completed into it, unless data() says the read's bytes
  // lie elsewhere.
  virtual uint32_t depth() const = 0;
  virtual uint64_t buffer_bytes() const = 0;
  virtual uint8_t* buffer(uint32_t buffer) const = 0;
  // Where the bytes of the read that Wait() last returned, into staging buffer `buffer`, lie
  // (its `*result` bytes from there): buffer(buffer) by default; a reader that serves reads
  // from memory of its own (a remote driver's block cache) returns a pointer into it instead of
  // copying the bytes into the staging buffer. Read-only; valid until Release(buffer), the next
  // Wait() or the next read queued into `buffer` (or the reader's destruction).
  virtual const uint8_t* data(uint32_t buffer) const { return this->buffer(buffer); }
  // Says that the caller is done with data(buffer) of the read Wait() last returned, so that the
  // reader can let go of the memory behind it now (a block the cache may then evict) rather than
  // at the next Wait(). The default does nothing.
  virtual void Release(uint32_t /*buffer*/) {}

  // Queues a read of `length` bytes (<= buffer_bytes(), a multiple of alignment(object)) at
  // `offset` (likewise) of `object` into staging buffer `buffer`, reported by Wait() with
  // `buffer` as its identity. Nothing needs to start before Submit(). Never fails: an error of
  // the read is its completion's.
  virtual void Queue(uint32_t buffer, uint32_t object, uint64_t offset, uint32_t length) = 0;
  // As Queue, for a read that lies inside [extent_offset, extent_offset + extent_length) of
  // `object`, a run of records that reads queued soon after (by this reader or another of the
  // same loader) will also read: the loader's block order passes each record's block. A reader
  // may fetch the whole extent once and serve every read inside it from there (a remote driver:
  // one GET per block instead of one per record); the default is Queue.
  virtual void QueueWithin(uint32_t buffer, uint32_t object, uint64_t offset, uint32_t length,
                           uint64_t /*extent_offset*/, uint64_t /*extent_length*/) {
    Queue(buffer, object, offset, length);
  }
  // Says that reads inside [offset, offset + length) of `object` (an extent as QueueWithin
  // takes) will be queued soon: a reader that fetches whole extents may start fetching this one
  // now, so its bytes arrive while earlier extents are read (dataset order at a URL reads
  // several extents ahead; see Loader's io_reason()). Never blocks and never fails; the
  // default does nothing.
  virtual void Prefetch(uint32_t /*object*/, uint64_t /*offset*/, uint64_t /*length*/) {}
  // Starts the queued reads. Errors: IOError naming the reader's failure (not a read's).
  virtual Status Submit() = 0;
  // Blocks until one read finishes; sets `*buffer` to its staging buffer and `*result` to the
  // bytes read (short past the end of the object) or -errno (a remote driver maps its failures
  // onto errno: EIO, ENOENT for a missing object, ESTALE for an object that changed). Requires
  // a read in flight. Errors: IOError when waiting itself fails (not the read: that is
  // `*result`), after which the reads in flight are lost.
  virtual Status Wait(uint32_t* buffer, int64_t* result) = 0;
  // Reads queued or started and not yet returned by Wait().
  virtual uint32_t in_flight() const = 0;
  // What the last failed read into `buffer` said beyond its errno, for the loader's error
  // message (a remote driver: the URL, HTTP status and the server's error); "" when nothing
  // more is known (local files: strerror says it all).
  virtual std::string ErrorDetail(uint32_t /*buffer*/) const { return std::string(); }
  // From another thread, while the reader's thread may be in Wait(): makes that Wait and every
  // later one return Cancelled soon (a remote driver: within about a second, not after a request
  // timeout against a server that hangs), the reads in flight abandoned; afterwards only
  // destruction is allowed. The Loader's destructor calls it before joining its fetch threads.
  // Never blocks; the default does nothing (local reads end by themselves).
  virtual void Interrupt() {}
  // Gives up the reads in flight without waiting for them, in a forked child whose parent
  // issued them (Loader's destructor): afterwards only destruction is allowed.
  virtual void Abandon() {}
  // The request counters since the last call (RequestStats), then starts counting afresh; all
  // zero for readers that send no requests.
  virtual RequestStats TakeRequestStats() { return RequestStats(); }
};

}  // namespace kiln

#endif  // KILN_READER_RANGE_READER_H_
