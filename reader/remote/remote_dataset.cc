#include "reader/remote/remote_dataset.h"

#include <algorithm>
#include <cerrno>
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
  KILN_RETURN_IF_ERROR(IntegerFromEnvironment("KILN_REMOTE_REQUEST_TIMEOUT_MS", 1, 86400000,
                                              &options.request_timeout_ms));
  KILN_RETURN_IF_ERROR(
      IntegerFromEnvironment("KILN_REMOTE_HEDGE_MIN_MS", 0, 3600000, &options.hedge.min_ms));
  KILN_RETURN_IF_ERROR(
      IntegerFromEnvironment("KILN_REMOTE_EXTENTS_FROM_US", 0, 60000000, &options.extents_from_us));
  KILN_RETURN_IF_ERROR(NumberFromEnvironment("KILN_REMOTE_HEDGE_P95_MULTIPLE", 0, 1000,
                                             &options.hedge.p95_multiple));
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
  std::string ErrorDetail(uint32_t buffer) const override { return errors_[buffer]; }
  // In a forked child: the connections are the parent's (closing them could send a TLS
  // close_notify on the parent's sessions), so the client is left alive.
  // The block cache's thread is the parent's too: its last reference is leaked, never destroyed.
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

// `url` without trailing slashes: the dataset's location, to which file names are appended.
std::string DatasetBase(const std::string& url) {
  std::string base = url;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return base;
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

// Fetches and parses `base`/kiln.json (its checksum checked as Manifest::Read checks it).
Result<Manifest> FetchManifest(RemoteClient* client, const std::string& base) {
  const std::string manifest_url = base + "/" + kManifestFileName;
  Result<ObjectInfo> manifest_object = client->Stat(manifest_url);
  if (!manifest_object.ok()) {
    if (manifest_object.status().code() != StatusCode::kNotFound) {
      return manifest_object.status();
    }
    return Status::NotFound(base + " is not a kiln dataset: no " + kManifestFileName + " (" +
                            manifest_object.status().message() + ")")
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

std::unique_ptr<MappedFile> FetchForVerify(RemoteClient* client, const std::string& path,
                                           const DataFileInfo* expected, VerifyReport* report) {
  auto problem = [&](int64_t offset, std::string why) {
    report->problems.push_back({path, -1, offset, std::move(why)});
    return nullptr;
  };
  ++report->files_checked;
  Result<ObjectInfo> object = client->Stat(path);
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
  const std::string base = DatasetBase(url);
  VerifyReport report;
  report.dir = base;
  report.deep = options.deep;
  const std::string manifest_url = base + "/" + kManifestFileName;
  auto fail = [&](const std::string& file, const Status& status) {
    report.problems.push_back({file, -1, -1, ProblemText(status, file)});
    return report;
  };
  Result<RemoteOptions> remote_options = OptionsFromEnvironment();
  if (!remote_options.ok()) return fail(base, remote_options.status());
  Result<std::unique_ptr<RemoteClient>> client = RemoteClient::Create(*remote_options);
  if (!client.ok()) return fail(base, client.status());
  Result<Manifest> manifest = FetchManifest(client->get(), base);
  if (!manifest.ok()) return fail(manifest_url, manifest.status());
  report.samples = manifest->samples;
  if (manifest->format != "shards") {
    report.problems.push_back({manifest_url, -1, -1,
                               "a " + manifest->format +
                                   " dataset cannot be verified at a URL (only shards can be "
                                   "read there): copy it to a local disk and verify the copy"});
    return report;
  }
  RemoteClient* c = client->get();
  VerifyShardFiles(
      base, *manifest, options,
      [c](const std::string& path, const DataFileInfo* expected, VerifyReport* r) {
        return FetchForVerify(c, path, expected, r);
      },
      &report);
  return report;
}

Status RemoteStore::ReadRange(uint32_t file, uint64_t offset, uint64_t size, uint8_t* dest) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (client_ == nullptr) {
    KILN_ASSIGN_OR_RETURN(client_, RemoteClient::Create(options_));
  }
  return ReadExactly(client_.get(), objects_[file], offset, size, dest);
}

Result<std::unique_ptr<RangeReader>> RemoteStore::NewRangeReader(uint32_t depth,
                                                                 uint64_t buffer_bytes,
                                                                 std::shared_ptr<BlockCache> blocks,
                                                                 const HedgePolicy& hedge) const {
  RemoteOptions options = options_;
  options.hedge = hedge;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<RemoteClient> client, RemoteClient::Create(options));
  return std::unique_ptr<RangeReader>(
      new RemoteRangeReader(*this, std::move(client), depth, buffer_bytes, std::move(blocks)));
}

Result<std::shared_ptr<BlockCache>> RemoteStore::NewBlockCache(uint32_t capacity_blocks,
                                                               uint32_t receivers,
                                                               uint32_t max_in_flight,
                                                               const HedgePolicy& hedge) const {
  RemoteOptions options = options_;
  options.hedge = hedge;
  std::vector<std::unique_ptr<RemoteClient>> clients;
  for (uint32_t i = 0; i < std::max<uint32_t>(1, receivers); ++i) {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<RemoteClient> client, RemoteClient::Create(options));
    clients.push_back(std::move(client));
  }
  return std::make_shared<BlockCache>(objects_, std::move(clients), capacity_blocks, max_in_flight);
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
  const std::string base = DatasetBase(url);
  KILN_ASSIGN_OR_RETURN(RemoteOptions options, OptionsFromEnvironment());
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<RemoteClient> client, RemoteClient::Create(options));
  KILN_ASSIGN_OR_RETURN(Manifest manifest, FetchManifest(client.get(), base));
  const std::string manifest_url = base + "/" + kManifestFileName;
  if (manifest.format != "shards") {
    return Status::NotSupported(
               base + ": a " + manifest.format +
               " dataset cannot be read from object storage or HTTP: its library reads one "
               "file by memory-mapped pages or POSIX reads, which range GETs cannot serve. "
               "Repack it as shards (kiln pack INPUT OUT --format shards) or copy it to a local "
               "disk first")
        .WithLocation({manifest_url});
  }
  std::vector<ShardFetch> fetches(manifest.files.size());
  for (size_t s = 0; s < manifest.files.size(); ++s) {
    fetches[s].object.url = base + "/" + manifest.files[s].file;
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
  auto store =
      std::make_shared<const RemoteStore>(std::move(options), std::move(objects), open_latency_us);
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
