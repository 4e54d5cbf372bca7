#include "reader/remote/remote_dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <utility>

#include "formats/file_util.h"
#include "formats/manifest.h"
#include "formats/mapped_file.h"
#include "formats/shards/shard_dataset.h"
#include "formats/shards/shard_format.h"
#include "formats/shards/shard_reader.h"
#include "reader/remote/block_cache.h"
#include "reader/remote/disk_cache.h"

namespace kiln::remote {

namespace {

// A whole number from the environment variable `name` within [low, high] into `*out`; unset
// or empty leaves `*out` as it is.
Status IntegerFromEnvironment(const char* name, int64_t low, int64_t high, int64_t* out) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return Status::Ok();
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < low || value > high) {
    return Status::InvalidArgument(std::string(name) + "=" + text + " is not a whole number in [" +
                                   std::to_string(low) + ", " + std::to_string(high) + "]");
  }
  *out = value;
  return Status::Ok();
}

// As IntegerFromEnvironment, for a decimal number.
Status NumberFromEnvironment(const char* name, double low, double high, double* out) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return Status::Ok();
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text, &end);
  if (errno != 0 || *end != '\0' || !(value >= low && value <= high)) {
    char range[64];
    std::snprintf(range, sizeof range, "[%g, %g]", low, high);
    return Status::InvalidArgument(std::string(name) + "=" + text + " is not a number in " + range);
  }
  *out = value;
  return Status::Ok();
}

// A byte count from the environment variable `name`: a whole number with an optional suffix K,
// M, G or T (powers of 1024), at most 2^50; unset or empty leaves `*out` as it is.
Status BytesFromEnvironment(const char* name, uint64_t* out) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return Status::Ok();
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  int shift = 0;
  if (end != text && *end != '\0' && end[1] == '\0') {
    const char* units = "KMGT";
    const char* u = std::strchr(units, *end);
    if (u != nullptr && *u != '\0') {
      shift = 10 * static_cast<int>(u - units + 1);
      ++end;
    }
  }
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-' ||
      value > ((uint64_t{1} << 50) >> shift)) {
    return Status::InvalidArgument(std::string(name) + "=" + text +
                                   " is not a byte count (a whole number, optionally with K, M, "
                                   "G or T for powers of 1024, at most 1 PiB)");
  }
  *out = static_cast<uint64_t>(value) << shift;
  return Status::Ok();
}

Result<RemoteOptions> OptionsFromEnvironment() {
  RemoteOptions options;
  KILN_ASSIGN_OR_RETURN(options.aws, LoadAwsSettings());
  if (const char* ca = std::getenv("AWS_CA_BUNDLE"); ca != nullptr && *ca != '\0') {
    options.ca_file = ca;
  }
  // AWS_MAX_ATTEMPTS counts the first attempt too, as the AWS CLI and SDKs read it.
  int64_t attempts = int64_t{options.max_retries} + 1;
  KILN_RETURN_IF_ERROR(IntegerFromEnvironment("AWS_MAX_ATTEMPTS", 1, 100, &attempts));
  options.max_retries = static_cast<uint32_t>(attempts - 1);
  KILN_RETURN_IF_ERROR(IntegerFromEnvironment("KILN_REMOTE_CONNECT_TIMEOUT_MS", 1, 3600000,
                                              &options.connect_timeout_ms));
  KILN_RETURN_IF_ERROR(IntegerFromEnvironment("KILN_REMOTE_STALL_TIMEOUT_MS", 0, 86400000,
                                              &options.stall_timeout_ms));
  KILN_RETURN_IF_ERROR(IntegerFromEnvironment("KILN_REMOTE_REQUEST_TIMEOUT_MS", 1, 86400000,
                                              &options.request_timeout_ms));
  KILN_RETURN_IF_ERROR(
      IntegerFromEnvironment("KILN_REMOTE_HEDGE_MIN_MS", 0, 3600000, &options.hedge.min_ms));
  KILN_RETURN_IF_ERROR(
      IntegerFromEnvironment("KILN_REMOTE_EXTENTS_FROM_US", 0, 60000000, &options.extents_from_us));
  KILN_RETURN_IF_ERROR(NumberFromEnvironment("KILN_REMOTE_HEDGE_P95_MULTIPLE", 0, 1000,
                                             &options.hedge.p95_multiple));
  if (const char* dir = std::getenv("KILN_REMOTE_CACHE_DIR"); dir != nullptr) {
    options.cache_dir = dir;
  }
  KILN_RETURN_IF_ERROR(BytesFromEnvironment("KILN_REMOTE_CACHE_BYTES", &options.cache_bytes));
  return options;
}

// A fetch thread's RangeReader over a RemoteStore's objects: its own client (one curl_multi
// handle keeping all its requests in flight at once), staging buffers in one allocation.
//
// Coalescing: the reads queued before a Submit() are sorted by object and offset, and reads of
// one object whose gap is at most kMaxGapBytes merge into one range GET of at most
// kMaxRangeBytes, as long as at least half its bytes are wanted (reads never fetch more than
// twice the bytes they need) (into a buffer of the group's own, then copied into each read's
// staging buffer: one memcpy, against a request's round trip saved). A lone read lands straight in
// its staging buffer. A read served from the BlockCache is not copied: data() points into its
// extent, which the reader keeps pinned until Release (or the next Wait). Reads are reported one
// per staging buffer, as the interface promises; a failed GET fails every read it carried, each
// with the server's answer.
class RemoteRangeReader final : public RangeReader {
 public:
  // Gaps read and thrown away rather than paying a request, and the longest merged GET
  // (bounds a group's buffer).
  static constexpr uint64_t kMaxGapBytes = 64 << 10;
  static constexpr uint64_t kMaxRangeBytes = 8 << 20;

  RemoteRangeReader(const RemoteStore& store, std::unique_ptr<RemoteClient> client, uint32_t depth,
                    uint64_t buffer_bytes, std::shared_ptr<BlockCache> cache)
      : store_(store),
        client_(std::move(client)),
        depth_(depth),
        buffer_bytes_(buffer_bytes),
        stride_((buffer_bytes + 63) / 64 * 64),
        memory_(new uint8_t[stride_ * depth + 64]),
        errors_(depth),
        data_(depth, nullptr),
        cache_(std::move(cache)) {}

  const std::string& object_name(uint32_t object) const override {
    return store_.objects()[object].url;
  }
  uint32_t alignment(uint32_t /*object*/) const override { return 1; }
  uint32_t depth() const override { return depth_; }
  uint64_t buffer_bytes() const override { return buffer_bytes_; }
  uint8_t* buffer(uint32_t buffer) const override {
    uint8_t* base = memory_.get();
    base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
    return base + uint64_t{buffer} * stride_;
  }
  const uint8_t* data(uint32_t buffer) const override {
    return data_[buffer] != nullptr ? data_[buffer] : this->buffer(buffer);
  }
  void Release(uint32_t buffer) override {
    if (returned_extent_ != nullptr && returned_buffer_ == buffer) ReleaseReturned();
  }
  void Queue(uint32_t buffer, uint32_t object, uint64_t offset, uint32_t length) override {
    errors_[buffer].clear();
    data_[buffer] = nullptr;
    queued_.push_back(Read{buffer, object, offset, length});
    ++in_flight_;
  }
  // A read inside a block: served from the shared BlockCache (one GET per block for all fetch
  // threads) when there is one, else read as Queue reads. The reader keeps its own reference (a
  // pin) to each extent its reads wait on, so the reads queued on an extent while others of it
  // wait (dataset order: up to `depth`) take neither the cache's lock nor its shared count.
  // When the cache is full (every extent it holds is in use), the read waits here (parked_)
  // and asks again in Wait until an extent is let go, rather than going out by itself: at a
  // window's end a fetch thread's first chunk of the next window would otherwise read the
  // records of most of its blocks one GET each (about 130 GETs per window of 16 blocks).
  void QueueWithin(uint32_t buffer, uint32_t object, uint64_t offset, uint32_t length,
                   uint64_t extent_offset, uint64_t extent_length) override {
    if (cache_ != nullptr && extent_offset <= offset &&
        offset + length <= extent_offset + extent_length) {
      errors_[buffer].clear();
      data_[buffer] = nullptr;
      const Within w{buffer, object, offset, length, extent_offset, extent_length};
      bool full = false;
      if (Defer(w, &full)) {
        ++in_flight_;
        return;
      }
      if (full) {
        parked_.push_back(w);
        ++in_flight_;
        return;
      }
    }
    Queue(buffer, object, offset, length);
  }
  // Starts the extent's GET on the shared BlockCache when it does not hold the extent yet (and
  // has room); the reads of it queued later by any fetch thread find it there.
  void Prefetch(uint32_t object, uint64_t offset, uint64_t length) override {
    if (cache_ != nullptr) cache_->Acquire(object, offset, length, nullptr, /*read_ahead=*/true);
  }
  Status Submit() override {
    std::sort(queued_.begin(), queued_.end(), [](const Read& a, const Read& b) {
      return a.object != b.object ? a.object < b.object : a.offset < b.offset;
    });
    for (size_t i = 0; i < queued_.size();) {
      Group g;
      g.object = queued_[i].object;
      g.offset = queued_[i].offset;
      uint64_t end = queued_[i].offset + queued_[i].length;
      uint64_t wanted = 0;  // bytes the group's reads need; the rest of its range is gaps
      size_t j = i;
      while (j < queued_.size() && queued_[j].object == g.object) {
        const Read& r = queued_[j];
        const uint64_t new_end = std::max(end, r.offset + r.length);
        const uint64_t gap = r.offset > end ? r.offset - end : 0;
        // A gap is worth reading instead of a request while it is short and the group stays at
        // least half wanted bytes (at most twice the bytes of reading each record alone).
        if (j > i && (gap > kMaxGapBytes || new_end - g.offset > kMaxRangeBytes ||
                      2 * (wanted + r.length) < new_end - g.offset)) {
          break;
        }
        wanted += r.length;
        end = new_end;
        g.reads.push_back(queued_[j++]);
      }
      g.length = end - g.offset;
      const uint64_t tag = next_tag_++;
      uint8_t* dest = buffer(g.reads[0].buffer);
      if (g.reads.size() > 1) {
        g.bytes.reset(new uint8_t[g.length]);
        dest = g.bytes.get();
      }
      const ObjectInfo& object = store_.objects()[g.object];
      const uint64_t offset = g.offset, length = g.length;
      groups_.emplace(tag, std::move(g));
      client_->QueueRange(tag, object, offset, length, dest);
      i = j;
    }
    queued_.clear();
    return Status::Ok();
  }
  Status Wait(uint32_t* buffer, int64_t* result) override {
    ReleaseReturned();
    if (!queued_.empty()) KILN_RETURN_IF_ERROR(Submit());
    while (ready_.empty()) {
      if (interrupted_.load(std::memory_order_acquire)) {
        return Status::Cancelled("the loader is closing: the remote reads in flight are abandoned");
      }
      const uint64_t seen = cache_ != nullptr ? cache_->fetches() : 0;
      if (!parked_.empty()) {
        RetryParked();
        if (!queued_.empty()) KILN_RETURN_IF_ERROR(Submit());
      }
      if (TakeReadyDeferred()) break;
      if (groups_.empty() && deferred_.empty() && parked_.empty()) {
        return Status::InvalidArgument("RangeReader::Wait: no read in flight");
      }
      // Parked reads wait for another thread to let go of an extent, which nothing signals:
      // they look again every millisecond.
      const bool waiting_on_cache = !deferred_.empty() || !parked_.empty();
      if (groups_.empty()) {  // only reads waiting on the cache's blocks
        cache_->WaitAny(seen, parked_.empty() ? 1000 : 1);
        continue;
      }
      RemoteCompletion done;
      // With reads waiting on the cache too, drive this client in short steps between looks.
      KILN_ASSIGN_OR_RETURN(bool got, client_->WaitFor(&done, waiting_on_cache ? 2 : 1000));
      if (!got) continue;
      auto it = groups_.find(done.tag);
      if (it == groups_.end()) return Status::Internal("remote read with an unknown tag");
      Split(it->second, done);
      groups_.erase(it);
    }
    const Ready& r = ready_.front();
    *buffer = r.buffer;
    *result = r.result;
    data_[r.buffer] = r.data;
    returned_buffer_ = r.buffer;
    returned_extent_ = r.extent;
    ready_.pop_front();
    --in_flight_;
    if (!ready_.empty() && ready_.front().data != nullptr) {
      // The next read's bytes, received into its extent by another thread: on their way to
      // this core's cache while the caller checks and decodes this one (its checksum otherwise
      // waits on memory line by line; about -15% CPU in block order at 0 ms, BENCHMARKS.md).
      const uint8_t* next = ready_.front().data;
      const uint64_t n = std::min<uint64_t>(static_cast<uint64_t>(ready_.front().result), 4096);
      for (uint64_t o = 0; o < n; o += 64) __builtin_prefetch(next + o);
      if (n > 0) __builtin_prefetch(next + n - 1);  // the last line, when `next` is unaligned
    }
    return Status::Ok();
  }
  uint32_t in_flight() const override { return in_flight_; }
  // From the Loader's destructor: the fetch thread's Wait returns Cancelled within about a
  // second (a wait on the block cache) or at once (on the client), not after the request timeout.
  void Interrupt() override {
    interrupted_.store(true, std::memory_order_release);
    client_->Wakeup();
  }
  std::string ErrorDetail(uint32_t buffer) const override { return errors_[buffer]; }
  // In a forked child: the connections are the parent's (closing them could send a TLS
  // close_notify on the parent's sessions), so the client is left alive.
  // The block cache's thread is the parent's too: its last reference is leaked, never destroyed
  // (the local cache's references, held by the client's options, leak with the client).
  void Abandon() override {
    (void)client_.release();
    if (cache_ != nullptr) (void)new std::shared_ptr<BlockCache>(std::move(cache_));
  }
  RequestStats TakeRequestStats() override {
    const RequestStats now = client_->stats();
    RequestStats delta = now.Since(taken_);
    taken_ = now;
    if (cache_ != nullptr) delta.Add(cache_->TakeRequestStats());
    return delta;
  }

 private:
  struct Read {
    uint32_t buffer = 0, object = 0;
    uint64_t offset = 0;
    uint32_t length = 0;
  };
  struct Deferred {  // a read served from a block of the cache
    uint32_t buffer = 0;
    const BlockCache::Extent* extent = nullptr;  // held by one of pins_
    uint64_t skip = 0;                           // where the read starts in the extent
    uint32_t length = 0;
  };
  struct Within {  // a read queued inside an extent (QueueWithin's arguments)
    uint32_t buffer = 0, object = 0;
    uint64_t offset = 0;
    uint32_t length = 0;
    uint64_t extent_offset = 0, extent_length = 0;
  };
  struct Pin {  // this reader's reference to an extent of the cache
    std::shared_ptr<const BlockCache::Extent> extent;
    uint32_t reads = 0;  // deferred_ and ready_ entries reading it, and the one last returned
  };
  struct Ready {  // a finished read, not yet returned by Wait
    uint32_t buffer = 0;
    int64_t result = 0;
    const uint8_t* data = nullptr;               // its bytes in an extent, or nullptr
    const BlockCache::Extent* extent = nullptr;  // the extent pinned for `data`, or nullptr
  };

  // The pin of the extent [offset, offset + length) of `object`, or nullptr; a failed extent is
  // not reused (a later read fetches it afresh, as the cache does).
  Pin* FindPin(uint32_t object, uint64_t offset, uint64_t length) {
    for (Pin& p : pins_) {
      const BlockCache::Extent& e = *p.extent;
      if (e.object == object && e.offset == offset && e.length == length &&
          !(BlockCache::IsReady(e) && e.result < 0)) {
        return &p;
      }
    }
    return nullptr;
  }
  // One read of `extent` finished; the pin goes with its last read, so that the reader holds
  // only the extents its reads wait on (the cache evicts those no one holds).
  void Unpin(const BlockCache::Extent* extent) {
    for (size_t i = 0; i < pins_.size(); ++i) {
      if (pins_[i].extent.get() != extent) continue;
      if (--pins_[i].reads == 0) {
        pins_[i] = std::move(pins_.back());
        pins_.pop_back();
      }
      return;
    }
  }
  struct Group {  // one range GET
    uint32_t object = 0;
    uint64_t offset = 0, length = 0;
    std::vector<Read> reads;
    std::unique_ptr<uint8_t[]> bytes;  // merged reads only
  };

  // Makes `w` wait on its extent (pinned, fetched by the cache if it does not hold it yet).
  // False when the cache cannot hold the extent: `*full` says whether for want of room.
  bool Defer(const Within& w, bool* full) {
    Pin* pin = FindPin(w.object, w.extent_offset, w.extent_length);
    if (pin == nullptr) {
      std::shared_ptr<const BlockCache::Extent> e =
          cache_->Acquire(w.object, w.extent_offset, w.extent_length, full);
      if (e == nullptr) return false;
      pins_.push_back(Pin{std::move(e), 0});
      pin = &pins_.back();
    }
    ++pin->reads;
    deferred_.push_back(
        Deferred{w.buffer, pin->extent.get(), w.offset - w.extent_offset, w.length});
    return true;
  }
  // Asks the cache again for the parked reads' extents, oldest first; one that can no longer be
  // held for another reason than room is read by itself (queued for Submit).
  void RetryParked() {
    size_t kept = 0;
    for (size_t i = 0; i < parked_.size(); ++i) {
      const Within& w = parked_[i];
      bool full = false;
      if (Defer(w, &full)) continue;
      if (full) {
        parked_[kept++] = w;
        continue;
      }
      queued_.push_back(Read{w.buffer, w.object, w.offset, w.length});
    }
    parked_.resize(kept);
  }

  // The read Wait returned last no longer needs its extent (data() is valid until Release or
  // the next Wait).
  void ReleaseReturned() {
    if (returned_extent_ == nullptr) return;
    data_[returned_buffer_] = nullptr;
    Unpin(returned_extent_);
    returned_extent_ = nullptr;
  }

  // Moves the reads whose blocks have arrived to ready_, each pointing into its extent (kept
  // pinned until Wait has returned it and it is released), or with the block's failure.
  // Returns true when it moved any.
  bool TakeReadyDeferred() {
    bool moved = false;
    for (size_t i = 0; i < deferred_.size();) {
      Deferred& d = deferred_[i];
      if (!BlockCache::IsReady(*d.extent)) {
        ++i;
        continue;
      }
      const BlockCache::Extent& e = *d.extent;
      if (e.result < 0) {
        errors_[d.buffer] = e.error;
        ready_.push_back(Ready{d.buffer, e.result, nullptr, nullptr});
        Unpin(d.extent);
      } else {
        const uint64_t fetched = static_cast<uint64_t>(e.result);
        const uint64_t got =
            fetched > d.skip ? std::min<uint64_t>(d.length, fetched - d.skip) : uint64_t{0};
        ready_.push_back(Ready{d.buffer, static_cast<int64_t>(got), e.bytes.get() + d.skip, &e});
      }
      deferred_[i] = deferred_.back();
      deferred_.pop_back();
      moved = true;
    }
    return moved;
  }

  // Turns a GET's completion into its reads' results (bytes, or -errno with the message).
  void Split(const Group& g, const RemoteCompletion& done) {
    for (const Read& r : g.reads) {
      if (!done.status.ok()) {
        errors_[r.buffer] = done.status.message();
        ready_.push_back(Ready{r.buffer, -ReadErrno(done), nullptr, nullptr});
        continue;
      }
      const uint64_t skip = r.offset - g.offset;
      const uint64_t got =
          done.bytes > skip ? std::min<uint64_t>(r.length, done.bytes - skip) : uint64_t{0};
      if (g.bytes != nullptr && got > 0) std::memcpy(buffer(r.buffer), g.bytes.get() + skip, got);
      ready_.push_back(Ready{r.buffer, static_cast<int64_t>(got), nullptr, nullptr});
    }
  }

  std::atomic<bool> interrupted_{false};
  const RemoteStore& store_;
  std::unique_ptr<RemoteClient> client_;
  uint32_t depth_;
  uint64_t buffer_bytes_;
  uint64_t stride_;
  std::unique_ptr<uint8_t[]> memory_;
  std::vector<std::string> errors_;    // the last failed read's message, per buffer
  std::vector<const uint8_t*> data_;   // data(): the returned read's bytes, or null
  std::vector<Read> queued_;           // since the last Submit
  std::map<uint64_t, Group> groups_;   // GETs in flight, by tag
  std::shared_ptr<BlockCache> cache_;  // block order's shared blocks, or nullptr
  std::vector<Within> parked_;         // reads waiting for room in the cache
  std::vector<Deferred> deferred_;     // reads waiting on the cache's blocks
  std::vector<Pin> pins_;              // the extents deferred_ reads
  std::deque<Ready> ready_;            // finished, not yet returned
  // The read Wait returned last, while it holds a pin (its bytes are in that extent).
  uint32_t returned_buffer_ = 0;
  const BlockCache::Extent* returned_extent_ = nullptr;
  uint64_t next_tag_ = 0;
  uint32_t in_flight_ = 0;  // reads queued and not yet returned by Wait
  RequestStats taken_;      // the client's counters at the last TakeRequestStats
};

// Reads exactly [offset, offset + size) of `object` into `dest`, alone on `client`.
// Errors: the read's; IOError naming the URL and offset when fewer bytes came.
Status ReadExactly(RemoteClient* client, const ObjectInfo& object, uint64_t offset, uint64_t size,
                   uint8_t* dest) {
  if (size == 0) return Status::Ok();
  client->QueueRange(0, object, offset, size, dest);
  RemoteCompletion done;
  KILN_RETURN_IF_ERROR(client->Wait(&done));
  KILN_RETURN_IF_ERROR(done.status);
  if (done.bytes != size) {
    return Status::IOError(object.url + ": a read of " + std::to_string(size) +
                           " bytes at offset " + std::to_string(offset) + " returned " +
                           std::to_string(done.bytes))
        .WithLocation({object.url, -1, static_cast<int64_t>(offset)});
  }
  return Status::Ok();
}

// A dataset's URL split for naming its objects: `base` (without trailing slashes, nor the
// slashes of "scheme://") names the dataset, file names are appended to it; `query` ("?..." or
// empty) is an http(s) URL's query string, a token every object shares (a container SAS, a
// CDN's signed query), kept after each object's name: base/kiln.json?query. An s3:// key may
// hold '?', so s3:// URLs have no query.
struct DatasetUrl {
  std::string base;
  std::string query;
  std::string Object(const std::string& name) const { return base + "/" + name + query; }
};

DatasetUrl SplitDatasetUrl(const std::string& url) {
  DatasetUrl out;
  out.base = url;
  if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0) {
    const size_t q = url.find('?');
    if (q != std::string::npos) {
      out.base = url.substr(0, q);
      out.query = url.substr(q);
    }
  }
  const size_t scheme_end = out.base.find("://");
  const size_t keep = scheme_end == std::string::npos ? 1 : scheme_end + 3;
  while (out.base.size() > keep && out.base.back() == '/') out.base.pop_back();
  return out;
}

// What open fetches of one shard: its stand-in mapping and the ranges still to come.
struct ShardFetch {
  std::unique_ptr<MappedFile> file;
  ObjectInfo object;  // url, the size and ETag the first answer gave
  uint64_t tail = 0;  // bytes of the suffix read first
  uint32_t pending = 0;
};

// The bytes a shard's footer, index and keys take, guessed from its record count before its
// footer is read: 40-byte index entries and keys of up to 64 bytes, plus the footer.
uint64_t TailGuess(const DataFileInfo& info) {
  return kShardFooterBytes + info.samples * (kShardIndexEntryBytes + 64) + 4096;
}

enum ReadKind : uint64_t { kHeader = 0, kSuffix = 1, kRest = 2 };

// Records what one answer says about the object: its size (checked against the manifest) and
// its ETag (the same in every answer, or the object changed while it was opened).
Status NoteAnswer(const RemoteCompletion& done, const DataFileInfo& info, ShardFetch* f) {
  KILN_RETURN_IF_ERROR(done.status);
  const uint64_t size = done.object_size != 0 ? done.object_size : done.bytes;
  KILN_RETURN_IF_ERROR(CheckSizeAgainstManifest(f->object.url, size, info.bytes));
  if (!done.etag.empty()) {
    if (f->object.etag.empty()) {
      f->object.etag = done.etag;
    } else if (f->object.etag != done.etag) {
      return Status::IOError(f->object.url + " changed while it was opened (ETag " +
                             f->object.etag + ", then " + done.etag + "); open it again")
          .WithLocation({f->object.url});
    }
  }
  return Status::Ok();
}

// Fetches every shard's header, footer, index and keys into its stand-in mapping, all shards'
// reads in flight at once.
Status FetchShardSections(RemoteClient* client, const Manifest& m, std::vector<ShardFetch>* fs) {
  for (size_t s = 0; s < fs->size(); ++s) {
    ShardFetch& f = (*fs)[s];
    const uint64_t bytes = m.files[s].bytes;
    if (bytes == 0) continue;
    uint8_t* base = f.file->mutable_data();
    f.tail = std::min(bytes, TailGuess(m.files[s]));
    client->QueueRange(s * 4 + kHeader, f.object, 0, std::min<uint64_t>(bytes, kShardHeaderBytes),
                       base);
    client->QueueSuffix(s * 4 + kSuffix, f.object, f.tail, base + bytes - f.tail);
    f.pending = 2;
  }
  while (client->in_flight() > 0) {
    RemoteCompletion done;
    KILN_RETURN_IF_ERROR(client->Wait(&done));
    const size_t s = done.tag / 4;
    ShardFetch& f = (*fs)[s];
    const DataFileInfo& info = m.files[s];
    KILN_RETURN_IF_ERROR(NoteAnswer(done, info, &f));
    if (--f.pending > 0 || f.tail >= info.bytes || done.tag % 4 == kRest) continue;
    // Header and suffix are in: read the rest of the index and keys if the guess fell short.
    const uint8_t* base = f.file->data();
    Result<ShardFooter> footer =
        DecodeShardFooter(base + info.bytes - kShardFooterBytes, info.bytes);
    if (!footer.ok()) continue;  // ShardReader::Open reports it with its offset
    const uint64_t tail_start = info.bytes - f.tail;
    if (footer->index_offset >= tail_start) continue;
    f.pending = 1;
    client->QueueRange(s * 4 + kRest, f.object, footer->index_offset,
                       tail_start - footer->index_offset,
                       f.file->mutable_data() + footer->index_offset);
  }
  return Status::Ok();
}

// Fetches and parses `url`'s kiln.json (its checksum checked as Manifest::Read checks it).
// `aws`: the settings the client signs with; an s3:// request refused (HTTP 4xx but 404) while
// they hold no keys says so, since the requests then went unsigned.
Result<Manifest> FetchManifest(RemoteClient* client, const DatasetUrl& url,
                               const AwsSettings& aws) {
  const std::string& base = url.base;
  const std::string manifest_url = url.Object(kManifestFileName);
  Result<ObjectInfo> manifest_object = client->Stat(manifest_url);
  if (!manifest_object.ok()) {
    const Status& failed = manifest_object.status();
    if (failed.code() != StatusCode::kNotFound) {
      if (aws.access_key_id.empty() && base.rfind("s3://", 0) == 0 &&
          failed.message().find(": HTTP 4") != std::string::npos) {
        return Status::IOError(std::string(failed.reason()) +
                               "; the request was not signed: no AWS credentials found "
                               "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the "
                               "keys of profile " +
                               aws.profile + " in the AWS credentials or config file)")
            .WithFile(manifest_url);
      }
      return failed;
    }
    return Status::NotFound(base + " is not a kiln dataset: no " + kManifestFileName + " (" +
                            manifest_object.status().message() + ")")
        .WithLocation({manifest_url});
  }
  // A manifest lists a file in about 200 bytes: 256 MiB would be a million shards. Anything
  // larger is not one (a wrong URL to a big object), and is not downloaded into memory.
  constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;
  if (manifest_object->size > kMaxManifestBytes) {
    return Status::Corruption(manifest_url + " is " + std::to_string(manifest_object->size) +
                              " bytes, more than the 256 MiB any kiln.json takes: not a kiln "
                              "manifest (is the URL the dataset's?)")
        .WithLocation({manifest_url});
  }
  std::string text(manifest_object->size, '\0');
  KILN_RETURN_IF_ERROR(ReadExactly(client, *manifest_object, 0, text.size(),
                                   reinterpret_cast<uint8_t*>(text.data())));
  return Manifest::FromJson(text, manifest_url);
}

// What a verify report says of `status` about `file`: its reason when it names `file` (the
// report names the file in a field of its own), else the whole message.
std::string ProblemText(const Status& status, const std::string& file) {
  return status.location().file == file ? std::string(status.reason()) : status.message();
}

// Fetches all of `path` (kVerifyPieceBytes per GET, every piece in flight) into memory for the
// verifier, its size (HEAD) checked against the manifest and every piece read with If-Match.
constexpr uint64_t kVerifyPieceBytes = 8 << 20;

// `path` is the file's name under the dataset's base; `query` follows it in the request.
std::unique_ptr<MappedFile> FetchForVerify(RemoteClient* client, const std::string& path,
                                           const std::string& query, const DataFileInfo* expected,
                                           VerifyReport* report) {
  auto problem = [&](int64_t offset, std::string why) {
    report->problems.push_back({path, -1, offset, std::move(why)});
    return nullptr;
  };
  ++report->files_checked;
  Result<ObjectInfo> object = client->Stat(path + query);
  if (!object.ok()) {
    return problem(-1, (object.status().code() == StatusCode::kNotFound ? "missing (" : "(") +
                           ProblemText(object.status(), path) + ")");
  }
  if (expected != nullptr && object->size != expected->bytes) {
    return problem(static_cast<int64_t>(std::min(object->size, expected->bytes)),
                   "file is " + std::to_string(object->size) + " bytes but the manifest says " +
                       std::to_string(expected->bytes) +
                       (object->size < expected->bytes ? " (truncated)" : ""));
  }
  Result<std::unique_ptr<MappedFile>> file = MappedFile::Anonymous(path, object->size);
  if (!file.ok()) return problem(-1, ProblemText(file.status(), path));
  uint8_t* base = (*file)->mutable_data();
  for (uint64_t off = 0; off < object->size; off += kVerifyPieceBytes) {
    client->QueueRange(off, *object, off, std::min(kVerifyPieceBytes, object->size - off),
                       base + off);
  }
  Status failed;
  while (client->in_flight() > 0) {
    RemoteCompletion done;
    Status waited = client->Wait(&done);
    if (!waited.ok()) return problem(-1, ProblemText(waited, path));
    const uint64_t want = std::min(kVerifyPieceBytes, object->size - done.tag);
    if (failed.ok() && !done.status.ok()) failed = done.status;
    if (failed.ok() && done.bytes != want) {
      failed =
          Status::IOError("a read of " + std::to_string(want) + " bytes at offset " +
                          std::to_string(done.tag) + " returned " + std::to_string(done.bytes));
    }
  }
  if (!failed.ok()) return problem(-1, ProblemText(failed, path));
  report->bytes_checked += object->size;
  return std::move(file).value();
}

}  // namespace

VerifyReport VerifyRemoteDataset(const std::string& url, const VerifyOptions& options) {
  const DatasetUrl dataset_url = SplitDatasetUrl(url);
  const std::string& base = dataset_url.base;
  VerifyReport report;
  report.dir = base;
  report.deep = options.deep;
  const std::string manifest_url = dataset_url.Object(kManifestFileName);
  auto fail = [&](const std::string& file, const Status& status) {
    report.problems.push_back({file, -1, -1, ProblemText(status, file)});
    return report;
  };
  Result<RemoteOptions> remote_options = OptionsFromEnvironment();
  if (!remote_options.ok()) return fail(base, remote_options.status());
  Result<std::unique_ptr<RemoteClient>> client = RemoteClient::Create(*remote_options);
  if (!client.ok()) return fail(base, client.status());
  Result<Manifest> manifest = FetchManifest(client->get(), dataset_url, remote_options->aws);
  if (!manifest.ok()) return fail(manifest_url, manifest.status());
  report.samples = manifest->samples;
  if (manifest->format != "shards") {
    report.problems.push_back({manifest_url, -1, -1,
                               "a dataset of format " + manifest->format +
                                   " cannot be verified at a URL (only shards can be "
                                   "read there): copy it to a local disk and verify the copy"});
    return report;
  }
  RemoteClient* c = client->get();
  VerifyShardFiles(
      base, *manifest, options,
      [c, &dataset_url](const std::string& path, const DataFileInfo* expected, VerifyReport* r) {
        return FetchForVerify(c, path, dataset_url.query, expected, r);
      },
      &report);
  return report;
}

Status RemoteStore::ReadRange(uint32_t file, uint64_t offset, uint64_t size, uint8_t* dest) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (client_ == nullptr) {
    KILN_ASSIGN_OR_RETURN(client_, RemoteClient::Create(options_));
  }
  Status read = ReadExactly(client_.get(), objects_[file], offset, size, dest);
  std::lock_guard<std::mutex> stats_lock(stats_mu_);
  read_stats_ = client_->stats();
  return read;
}

RequestStats RemoteStore::read_range_stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return read_stats_;
}

Result<std::unique_ptr<RangeReader>> RemoteStore::NewRangeReader(
    uint32_t depth, uint64_t buffer_bytes, std::shared_ptr<BlockCache> blocks,
    const HedgePolicy& hedge, std::shared_ptr<DiskCache> disk) const {
  RemoteOptions options = options_;
  options.hedge = hedge;
  options.cache = std::move(disk);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<RemoteClient> client, RemoteClient::Create(options));
  return std::unique_ptr<RangeReader>(
      new RemoteRangeReader(*this, std::move(client), depth, buffer_bytes, std::move(blocks)));
}

Result<std::shared_ptr<BlockCache>> RemoteStore::NewBlockCache(
    uint32_t capacity_blocks, uint32_t receivers, uint32_t max_in_flight, const HedgePolicy& hedge,
    std::shared_ptr<DiskCache> disk) const {
  RemoteOptions options = options_;
  options.hedge = hedge;
  options.cache = std::move(disk);
  std::vector<std::unique_ptr<RemoteClient>> clients;
  for (uint32_t i = 0; i < std::max<uint32_t>(1, receivers); ++i) {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<RemoteClient> client, RemoteClient::Create(options));
    clients.push_back(std::move(client));
  }
  return std::make_shared<BlockCache>(objects_, std::move(clients), capacity_blocks, max_in_flight);
}

Result<std::shared_ptr<DiskCache>> RemoteStore::OpenDiskCache(const std::string& dir,
                                                              uint64_t capacity_bytes) const {
  DiskCache::Options o;
  o.dir = dir;
  o.capacity_bytes = capacity_bytes;
  return DiskCache::Open(o, url_, objects_);
}

Status CheckUploadTarget(const std::string& url, bool overwrite) {
  const DatasetUrl dataset_url = SplitDatasetUrl(url);
  // The objects' names are checked, not the dataset's URL: s3://BUCKET (a bucket's root, whose
  // objects are s3://BUCKET/kiln.json, ...) is a dataset's URL as s3://BUCKET/PREFIX is, though
  // it names no object itself.
  const std::string manifest_url = dataset_url.Object(kManifestFileName);
  if (Result<RemoteUrl> parsed = ParseRemoteUrl(manifest_url); !parsed.ok()) {
    return Status::InvalidArgument(url + " cannot hold a dataset: " + parsed.status().message());
  }
  KILN_ASSIGN_OR_RETURN(RemoteOptions options, OptionsFromEnvironment());
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<RemoteClient> client, RemoteClient::Create(options));
  Result<ObjectInfo> existing = client->Stat(manifest_url);
  if (existing.ok() && !overwrite) {
    return Status::InvalidArgument(manifest_url +
                                   " exists: a dataset is already there (--overwrite replaces "
                                   "it, kiln.json last)");
  }
  if (!existing.ok() && existing.status().code() != StatusCode::kNotFound) {
    return existing.status();
  }
  if (!existing.ok() && existing.status().message().find("NoSuchBucket") != std::string::npos) {
    return existing.status();
  }
  return Status::Ok();
}

Result<UploadReport> UploadDataset(const std::string& dir, const std::string& url, bool overwrite,
                                   const std::function<void(uint64_t, uint64_t)>& progress) {
  const auto started = std::chrono::steady_clock::now();
  const DatasetUrl dataset_url = SplitDatasetUrl(url);
  KILN_RETURN_IF_ERROR(CheckUploadTarget(url, overwrite));
  KILN_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Read(dir));
  if (manifest.format != "shards") {
    return Status::NotSupported(dir + ": a dataset of format " + manifest.format +
                                " cannot be read from a URL, so it is not uploaded: pack "
                                "it with --format shards");
  }
  KILN_ASSIGN_OR_RETURN(RemoteOptions options, OptionsFromEnvironment());
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<RemoteClient> client, RemoteClient::Create(options));
  struct File {
    std::string name;
    uint64_t bytes;
  };
  std::vector<File> files;
  uint64_t total = 0;
  for (const DataFileInfo& f : manifest.files) {
    files.push_back({f.file, f.bytes});
    total += f.bytes;
  }
  struct stat st;
  // The lists of rejected and skipped inputs that kiln.json names, uploaded with the data files
  // (before kiln.json) so that the copy holds what the directory does; one the pack did not
  // leave (a dataset copied without it) is not there locally either.
  for (const std::string& name : SourceListFiles(manifest)) {
    const std::string path = dir + "/" + name;
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;
      return Status::FromErrno("cannot stat", path, errno);
    }
    files.push_back({name, static_cast<uint64_t>(st.st_size)});
    total += static_cast<uint64_t>(st.st_size);
  }
  const std::string manifest_path = dir + "/" + kManifestFileName;
  if (::stat(manifest_path.c_str(), &st) != 0) {
    return Status::FromErrno("cannot stat", manifest_path, errno);
  }
  const uint64_t manifest_bytes = static_cast<uint64_t>(st.st_size);
  total += manifest_bytes;
  UploadReport report;
  uint64_t done_bytes = 0;
  // Puts `list` (up to kInFlight at once), then checks each with a HEAD.
  constexpr size_t kInFlight = 4;
  auto put_all = [&](const std::vector<File>& list) -> Status {
    size_t next = 0, running = 0;
    while (next < list.size() || running > 0) {
      while (next < list.size() && running < kInFlight) {
        const File& f = list[next];
        const std::string path = dir + "/" + f.name;
        if (::stat(path.c_str(), &st) != 0) return Status::FromErrno("cannot stat", path, errno);
        if (static_cast<uint64_t>(st.st_size) != f.bytes) {
          return Status::Corruption("the file is " + std::to_string(st.st_size) +
                                    " bytes, kiln.json says " + std::to_string(f.bytes))
              .WithFile(path);
        }
        client->QueuePut(next, dataset_url.Object(f.name), path, f.bytes);
        ++next;
        ++running;
      }
      RemoteCompletion c;
      KILN_RETURN_IF_ERROR(client->Wait(&c));
      --running;
      if (!c.status.ok()) return c.status;
      const File& f = list[c.tag];
      KILN_ASSIGN_OR_RETURN(ObjectInfo up, client->Stat(dataset_url.Object(f.name)));
      if (up.size != f.bytes) {
        return Status::IOError(up.url + ": " + std::to_string(up.size) +
                               " bytes after the upload, " + std::to_string(f.bytes) + " sent")
            .WithFile(up.url);
      }
      ++report.files;
      report.bytes += f.bytes;
      done_bytes += f.bytes;
      if (progress) progress(done_bytes, total);
    }
    return Status::Ok();
  };
  KILN_RETURN_IF_ERROR(put_all(files));
  // The manifest last: until it is there, the dataset does not exist for a reader.
  KILN_RETURN_IF_ERROR(put_all({{kManifestFileName, manifest_bytes}}));
  report.requests = client->stats().requests;
  report.retries = client->stats().retries;
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return report;
}

std::string RequestRateWarning(const std::string& url, double gets_per_s) {
  if (url.rfind("s3://", 0) != 0 || gets_per_s <= kS3GetsPerSecondPerPrefix) return "";
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.0f", gets_per_s);
  return url + " is read at " + rate +
         " range GETs/s, more than the about 5,500 GET/s that AWS S3 serves one prefix before "
         "answering 503 SlowDown (retried, but slower): block order (shuffle \"block\") reads "
         "one GET per block instead of about one per record";
}

Result<std::unique_ptr<Dataset>> OpenRemoteDataset(const std::string& url) {
  const DatasetUrl dataset_url = SplitDatasetUrl(url);
  const std::string& base = dataset_url.base;
  KILN_ASSIGN_OR_RETURN(RemoteOptions options, OptionsFromEnvironment());
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<RemoteClient> client, RemoteClient::Create(options));
  KILN_ASSIGN_OR_RETURN(Manifest manifest, FetchManifest(client.get(), dataset_url, options.aws));
  const std::string manifest_url = dataset_url.Object(kManifestFileName);
  if (manifest.format != "shards") {
    return Status::NotSupported(
               base + ": a dataset of format " + manifest.format +
               " cannot be read from object storage or HTTP: its library reads one "
               "file by memory-mapped pages or POSIX reads, which range GETs cannot serve. "
               "Repack it as shards (kiln pack INPUT OUT --format shards) or copy it to a local "
               "disk first")
        .WithLocation({manifest_url});
  }
  std::vector<ShardFetch> fetches(manifest.files.size());
  for (size_t s = 0; s < manifest.files.size(); ++s) {
    fetches[s].object.url = dataset_url.Object(manifest.files[s].file);
    fetches[s].object.size = manifest.files[s].bytes;
    KILN_ASSIGN_OR_RETURN(fetches[s].file,
                          MappedFile::Anonymous(fetches[s].object.url, manifest.files[s].bytes));
  }
  KILN_RETURN_IF_ERROR(FetchShardSections(client.get(), manifest, &fetches));
  std::vector<std::unique_ptr<ShardReader>> shards;
  std::vector<ObjectInfo> objects;
  for (ShardFetch& f : fetches) {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<ShardReader> shard, ShardReader::Open(std::move(f.file)));
    shards.push_back(std::move(shard));
    objects.push_back(std::move(f.object));
  }
  const int64_t open_latency_us = client->stats().LatencyQuantileUs(0);
  auto store = std::make_shared<const RemoteStore>(std::move(options), std::move(objects),
                                                   open_latency_us, base);
  KILN_ASSIGN_OR_RETURN(
      std::unique_ptr<ShardDataset> dataset,
      ShardDataset::FromShards(base, std::move(manifest), std::move(shards), std::move(store)));
  return std::unique_ptr<Dataset>(std::move(dataset));
}

void InstallRemoteDatasets() {
  Dataset::SetRemoteDatasetOpener(&OpenRemoteDataset);
  SetRemoteVerifier(&VerifyRemoteDataset);
}

}  // namespace kiln::remote
