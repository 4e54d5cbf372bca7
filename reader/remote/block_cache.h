// Whole blocks of remote objects for block order (reader/remote/remote.md, "Block order"): one
// range GET per block, shared by every fetch thread of one Loader, instead of one GET per record.
//
// In block order the sampler deals runs of consecutive samples (blocks) and shuffles within a
// window of them, so a window's records are scattered over its blocks and every fetch thread
// reads from all of them. The Loader passes each record's block extent (RangeReader::QueueWithin);
// the first read of an extent asks the cache, which fetches the whole extent with one GET on one
// of its receivers, and every read inside it (of any fetch thread) is copied from there.
//
// Receivers: the cache has one or more threads, each with its own RemoteClient (one curl_multi
// handle), that send the GETs and receive the bodies; the Loader gives it one per fetch thread,
// so receiving is spread over as many threads as reading was before the cache. Extents are
// handed out in the order they were acquired to whichever receiver has room: with
// `max_in_flight` (per receiver) set, at most that many GETs of one receiver are in flight and
// the rest wait in order, so that the extent needed next is not slowed by bandwidth shared with
// every extent read ahead (dataset order); 0 puts every acquired extent in flight at once (block
// order, where a window's blocks are all read at the same time).
//
// Memory: at most `capacity_blocks` blocks held (the Loader sizes it for a window of blocks plus
// the blocks the fetch threads may start ahead; counted in blocks, not bytes, because a block's
// extent includes the record alignment padding, so a byte budget made from sample sizes holds
// fewer blocks than intended). Each extent counts as its share of the longest extent acquired,
// so that the pieces of a block across two objects (one extent each) count as one block
// together. An extent is evicted, oldest first, once no read has waited on it for
// kEvictAfterUnusedUs and room is needed (a block between two chunks' reads of it is not
// evicted only to be fetched again for the next chunk). When
// no extent can be evicted (all in use), Acquire returns nullptr and says so: the cache never
// blocks a read for room and never grows past its capacity (RemoteRangeReader parks such a
// read and asks again once its reads have moved on). An evicted block read again later is
// fetched again.
//
// Errors: a failed GET (after the client's retries) fails every read waiting on the extent,
// with the server's answer; the extent is dropped, so a later read fetches it afresh.
// Thread safety: every member from any thread. Lifetime: the cache's threads stop and join in
// the destructor; in a forked child (whose copy has no thread) it must never be destroyed (the
// readers sharing it leak their reference in RangeReader::Abandon).
#ifndef KILN_READER_REMOTE_BLOCK_CACHE_H_
#define KILN_READER_REMOTE_BLOCK_CACHE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "reader/range_reader.h"
#include "reader/remote/remote_client.h"

namespace kiln::remote {

class BlockCache {
 public:
  // An extent's buffer (malloc'd: large ones are aligned for transparent huge pages).
  struct FreeBytes {
    void operator()(uint8_t* p) const;
  };
  using Bytes = std::unique_ptr<uint8_t[], FreeBytes>;
  // One extent: [offset, offset + length) of object `object`.
  struct Extent {
    uint32_t object = 0;
    uint64_t offset = 0, length = 0;
    Bytes bytes;                // length bytes once ready
    uint64_t buffer_bytes = 0;  // bytes' size (>= length: a reused buffer may be larger)
    // Set (release) once bytes, result and error are final; readers load it (acquire) first.
    std::atomic<bool> ready{false};
    int64_t result = 0;  // bytes fetched, or -errno (remote_dataset.cc's mapping) on failure
    std::string error;   // the server's answer on failure
    // When eviction first found it unused since it was last handed out (steady clock, us;
    // 0: not seen unused). Under the cache's lock.
    int64_t unused_since_us = 0;
  };

  // `objects`: the store's objects (URLs, sizes, ETags), valid for the cache's life; one
  // receiver thread per client in `clients` (at least one); `max_in_flight`: GETs in flight per
  // receiver, 0 for no limit (see above).
  BlockCache(const std::vector<ObjectInfo>& objects,
             std::vector<std::unique_ptr<RemoteClient>> clients, uint32_t capacity_blocks,
             uint32_t max_in_flight = 0);
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // The extent, fetching it when the cache does not hold it; nullptr when it cannot be held:
  // every held extent in use (`*full` set to true: room may come once reads finish), or another
  // extent held at `offset` of another length (`*full` false). Never blocks on the network.
  // `read_ahead`: an extent read ahead in dataset order (RangeReader::Prefetch), for which any
  // extent no read holds is evicted at once, without kEvictAfterUnusedUs (as read ahead always
  // did: a skipped read-ahead costs a round trip later).
  std::shared_ptr<const Extent> Acquire(uint32_t object, uint64_t offset, uint64_t length,
                                        bool* full = nullptr, bool read_ahead = false);
  // Waits up to `timeout_ms` until fetches() passes `seen` (read before looking at the extents
  // one waits on, so that none finishing in between is missed).
  void WaitAny(uint64_t seen, int timeout_ms);
  static bool IsReady(const Extent& extent) { return extent.ready.load(std::memory_order_acquire); }

  // The receivers' clients' counters since the last call (all callers together add up to the
  // whole).
  RequestStats TakeRequestStats();
  // Extents fetched (or failed) so far: WaitAny's `seen`. Takes no lock.
  uint64_t fetches() const { return fetches_.load(std::memory_order_acquire); }

 private:
  using Key = std::pair<uint32_t, uint64_t>;  // (object, offset)
  // One receiver: its client and thread; `stats` is a copy of the client's counters, updated by
  // the thread under mu_.
  struct Receiver {
    std::unique_ptr<RemoteClient> client;  // used by its thread only
    RequestStats stats;
    std::thread thread;
  };
  void Run(Receiver* receiver);
  // An extent is evicted only once it has been unused this long (see above).
  static constexpr int64_t kEvictAfterUnusedUs = 2000;
  bool FitsLocked(uint64_t length) const;
  bool MakeRoomLocked(uint64_t length, bool at_once);
  Bytes TakeBufferLocked(uint64_t length, uint64_t* size);
  void DropLocked(const Extent& e);

  const std::vector<ObjectInfo>& objects_;
  const uint32_t capacity_blocks_;
  mutable std::mutex mu_;
  const uint32_t max_in_flight_;
  std::condition_variable work_cv_;   // the receivers: extents to fetch, or stop
  std::condition_variable ready_cv_;  // readers: an extent finished
  std::map<Key, std::shared_ptr<Extent>> held_;
  uint64_t held_bytes_ = 0;  // the lengths of held_'s extents
  uint64_t largest_ = 0;     // the longest extent acquired so far (a whole block's length)
  std::deque<Key> age_;      // held_ keys, oldest first
  // Buffers of evicted extents (bytes, size), reused for new ones; at most capacity_blocks_.
  std::vector<std::pair<Bytes, uint64_t>> spare_;
  std::deque<std::shared_ptr<Extent>> to_fetch_;  // acquired, not yet given to a receiver
  std::atomic<uint64_t> fetches_{0};              // written under mu_, read without it
  RequestStats taken_;
  bool stop_ = false;
  std::vector<std::unique_ptr<Receiver>> receivers_;
};

}  // namespace kiln::remote

#endif  // KILN_READER_REMOTE_BLOCK_CACHE_H_
