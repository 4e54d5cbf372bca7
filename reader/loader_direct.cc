// Loader's direct io path (LoaderOptions::io = kDirect): the fetch-thread loop that reads
// records through the thread's RangeReader (reader/range_reader.h; UringRangeReader today)
// instead of the mappings.
#include <algorithm>
#include <cstring>

#include "formats/byte_coding.h"
#include "formats/fault_guard.h"
#include "reader/loader.h"
#include "reader/loader_clock.h"

namespace kiln {

namespace {

Status SigbusError(const Dataset& dataset, uint64_t index) {
  return Status::IOError(dataset.SampleLocation(index) +
                         ": the mapped file could not be read (SIGBUS): it was truncated or "
                         "replaced while open, or its storage failed");
}

// The index entries still come from the mapping, so each call that reads one arms its own
// SIGBUS scope: no state of the worker loop lives in a frame sigsetjmp returns to twice.
// Returns false when the read faulted.
bool GuardedLocate(const Dataset& dataset, uint64_t index, Dataset::StoredLocation* location,
                   bool* found) {
  MappedReadFaultScope scope;
  if (KILN_MAPPED_READ_FAULTED(scope)) return false;
  *found = dataset.LocateStored(index, location);
  return true;
}

Status GuardedDecode(const Dataset& dataset, uint64_t index, const uint8_t* stored, uint64_t size,
                     RecordDecoder* decoder, uint8_t* out, int64_t* label) {
  MappedReadFaultScope scope;
  if (KILN_MAPPED_READ_FAULTED(scope)) return SigbusError(dataset, index);
  return dataset.DecodeStored(index, stored, size, decoder, out, label);
}

Status GuardedReadSample(const Dataset& dataset, uint64_t index, RecordDecoder* decoder,
                         uint8_t* out, int64_t* label) {
  MappedReadFaultScope scope;
  if (KILN_MAPPED_READ_FAULTED(scope)) return SigbusError(dataset, index);
  return dataset.ReadSample(index, decoder, out, label);
}

}  // namespace

// The state of one fetch thread's direct io loop: the chunks it holds (at most two: the one
// finishing and the next, so the queue stays full across chunks), which chunk and position each
// staging buffer's read is for, and the counters it adds to stats_ as each chunk finishes. It
// lives on the fetch thread's stack; its members are that thread's alone, and it touches the
// Loader's shared state only with mu_ held (the *Locked functions and `lock`).
class Loader::DirectWorker {
 public:
  DirectWorker(Loader& loader, RangeReader* reader)
      : loader_(loader),
        dataset_(*loader.dataset_),
        reader_(*reader),
        augment_(loader.options_.augment.enabled() && !loader.dataset_->jpeg_records()),
        out_bytes_(loader.out_schema_.sample_bytes()),
        scratch_(augment_ ? dataset_.schema().sample_bytes() : 0),
        jpeg_(loader.MakeJpegDecoder()),
        pending_(reader->depth()) {
    decoder_.set_image_decoder(jpeg_.get());
    for (uint32_t i = reader->depth(); i-- > 0;) free_buffers_.push_back(i);
  }

  // Fills chunks until the loader stops: claims a chunk, issues its reads, claims the next while
  // the last reads are in flight, decodes each read as it completes, and finishes each chunk
  // once all its reads are done.
  void Run() {
    // mu_ is held at the top of each iteration.
    std::unique_lock<std::mutex> lock(loader_.mu_);
    while (true) {
      if (count_ == 0) {
        if (!WaitAndClaimFirst(lock)) return;
      } else {
        lock.unlock();
      }
      if (IssueReads()) Submit();
      if (ClaimAhead(lock)) {
        lock.lock();
        continue;  // issue its reads
      }
      if (!FinishDoneTasks(lock) && reader_.in_flight() != 0) WaitForOneRead();
      lock.lock();
    }
  }

 private:
  // One chunk being read.
  struct Task {
    Slot* slot = nullptr;
    uint32_t begin = 0, end = 0;
    std::vector<Dataset::StoredLocation> locations;  // [k - begin]
    std::vector<uint32_t> order;  // positions to read, by file and offset: neighbours merge
    size_t issued = 0;            // of order
    uint32_t outstanding = 0;     // reads in flight
    // The error of the lowest failing position: what the mapped path reports (it stops at the
    // first failure in position order, every position before it having succeeded).
    Status error;
    uint32_t error_k = UINT32_MAX;
    void Fail(uint32_t k, Status status) {
      if (k < error_k) {
        error_k = k;
        error = std::move(status);
      }
    }
    bool done() const { return issued == order.size() && outstanding == 0; }
  };
  struct Pending {  // what a staging buffer's read is for
    uint32_t task = 0;
    uint32_t k = 0;
    uint64_t start = 0;  // aligned offset the read starts at
  };
  // The aligned bytes a direct read of a record covers.
  struct Span {
    uint64_t start = 0, length = 0;
  };

  Span AlignedSpan(const Dataset::StoredLocation& loc) const {
    const uint32_t align = reader_.alignment(loc.file);
    const uint64_t start = loc.offset / align * align;
    return {start, AlignUp(loc.offset + loc.size, align) - start};
  }

  // Waits (mu_ held by `lock`) for a claimable chunk, claims it and prepares it with mu_
  // released. Returns false, with mu_ still held, when the loader stops.
  bool WaitAndClaimFirst(std::unique_lock<std::mutex>& lock) {
    const uint64_t wait_start = NowNs();
    loader_.work_cv_.wait(lock, [this] { return loader_.stop_ || loader_.TaskClaimableLocked(); });
    if (loader_.stop_) return false;
    loader_.stats_.slot_wait_ns += NowNs() - wait_start;
    const uint32_t id = ClaimLocked();
    lock.unlock();
    StartMarks(NowNs(), ThreadCpuNs());
    Prepare(tasks_[id]);
    return true;
  }

  // Claims the next chunk with mu_ held; returns its task id. The caller prepares it unlocked.
  uint32_t ClaimLocked() {
    uint64_t b = 0;
    uint32_t chunk = 0;
    loader_.ClaimTaskLocked(&b, &chunk);
    ++loader_.busy_;
    const uint32_t id = count_ == 0 ? 0 : 1 - seq_[0];
    seq_[count_++] = id;
    Task& t = tasks_[id];
    t.slot = &loader_.slots_[b % loader_.slots_.size()];
    t.begin = std::min(t.slot->size, chunk * loader_.chunk_samples_);
    t.end = std::min(t.slot->size, t.begin + loader_.chunk_samples_);
    return id;
  }

  // Claims the next chunk while the only one held has all its reads issued and a buffer is
  // free, so the queue stays full across chunks. `lock` is released on entry and on return;
  // returns true when a chunk was claimed and prepared.
  bool ClaimAhead(std::unique_lock<std::mutex>& lock) {
    if (count_ != 1 || tasks_[seq_[0]].issued != tasks_[seq_[0]].order.size() ||
        free_buffers_.empty()) {
      return false;
    }
    lock.lock();
    if (loader_.stop_ || !loader_.TaskClaimableLocked()) {
      lock.unlock();
      return false;
    }
    const uint32_t id = ClaimLocked();
    lock.unlock();
    Prepare(tasks_[id]);
    return true;
  }

  // Looks up the task's records and orders the direct reads; those that cannot be read directly
  // (a damaged index entry, a fault, a record larger than a staging buffer) are read, or
  // reported, through the mapping as FillChunk would.
  void Prepare(Task& t) {
    t.order.clear();
    t.issued = 0;
    t.outstanding = 0;
    t.error = Status::Ok();
    t.error_k = UINT32_MAX;
    if (t.begin == t.end) return;
    Slot& slot = *t.slot;
    loader_.sampler_.BatchSamples(slot.batch, t.begin, t.end, slot.indices.data() + t.begin,
                                  slot.is_padding.data() + t.begin);
    t.locations.resize(t.end - t.begin);
    for (uint32_t k = t.begin; k < t.end; ++k) PlanRecord(t, k);
    // Reads in file order: adjacent records of one submission merge into one device request
    // (block and dataset order), and random ones reach the device sorted. The order of reads
    // never changes where a sample lands.
    std::sort(t.order.begin(), t.order.end(), [&](uint32_t a, uint32_t b) {
      const Dataset::StoredLocation& x = t.locations[a - t.begin];
      const Dataset::StoredLocation& y = t.locations[b - t.begin];
      return x.file != y.file ? x.file < y.file : x.offset < y.offset;
    });
  }

  // Locates position k's record: queues it for a direct read when its aligned span fits a
  // staging buffer, else reads it through the mapping now.
  void PlanRecord(Task& t, uint32_t k) {
    Slot& slot = *t.slot;
    const uint64_t index = slot.indices[k];
    Dataset::StoredLocation& loc = t.locations[k - t.begin];
    bool found = false;
    if (!GuardedLocate(dataset_, index, &loc, &found)) {
      t.Fail(k, SigbusError(dataset_, index));
      return;
    }
    if (found && AlignedSpan(loc).length <= reader_.buffer_bytes()) {
      t.order.push_back(k);
      return;
    }
    loader_.NameSample(&decoder_, index);
    Status s = GuardedReadSample(dataset_, index, &decoder_, Output(slot, k), &slot.labels[k]);
    Place(t, k, std::move(s));
  }

  // Where position k's decoded sample goes: the slot, or the scratch buffer that augmenting
  // reads from.
  uint8_t* Output(Slot& slot, uint32_t k) {
    return augment_ ? scratch_.data() : slot.data + k * out_bytes_;
  }

  // Records a decode of position k into Output(): its failure, or (when augmenting) the crop
  // and flip into the slot.
  void Place(Task& t, uint32_t k, Status decoded) {
    if (!decoded.ok()) {
      t.Fail(k, loader_.DamagedInLocalCache(t.locations[k - t.begin], std::move(decoded)));
    } else if (augment_) {
      loader_.AugmentIntoSlot(*t.slot, k, scratch_.data(), &augment_ns_);
    }
  }

  // Queues reads into every free buffer, the older task's first. Returns true when it queued
  // any.
  bool IssueReads() {
    bool queued = false;
    for (uint32_t i = 0; i < count_; ++i) {
      const uint32_t id = seq_[i];
      Task& t = tasks_[id];
      while (t.issued < t.order.size() && !free_buffers_.empty()) {
        IssueRead(id, t.order[t.issued++]);
        queued = true;
      }
    }
    return queued;
  }

  void IssueRead(uint32_t id, uint32_t k) {
    Task& t = tasks_[id];
    const Dataset::StoredLocation& loc = t.locations[k - t.begin];
    const Span span = AlignedSpan(loc);
    const uint32_t buffer = free_buffers_.back();
    free_buffers_.pop_back();
    pending_[buffer] = Pending{id, k, span.start};
    Span block;
    if (loader_.extent_samples_ != 0 && BlockExtent(t.slot->indices[k], loc.file, &block)) {
      reader_.QueueWithin(buffer, loc.file, span.start, static_cast<uint32_t>(span.length),
                          block.start, block.length);
    } else {
      reader_.Queue(buffer, loc.file, span.start, static_cast<uint32_t>(span.length));
    }
    ++t.outstanding;
  }

  // At a URL, whole extents (Loader::extent_samples_): the bytes of `file` that the extent
  // holding sample `index` occupies there, [its first record's offset in `file`, its last
  // record's end there). Records of a file are in sample order, so that is one run; an extent
  // that spans two files (a block across a shard boundary) is one piece per file, each read
  // with a GET of its own. On reaching a new extent, the next extent_ahead_ extents are
  // prefetched (dataset order).
  bool BlockExtent(uint64_t index, uint32_t file, Span* out) {
    const uint64_t q = index / loader_.extent_samples_;
    if (q != extent_block_) {
      extent_block_ = q;
      extent_known_ = false;
      for (uint64_t a = 1; a <= loader_.extent_ahead_; ++a) PrefetchExtent(q + a);
    }
    if (!extent_known_ || extent_file_ != file) {
      extent_known_ = true;
      extent_file_ = file;
      extent_ok_ = ExtentPiece(q, index, file, &extent_);
    }
    if (!extent_ok_) return false;
    *out = extent_;
    return true;
  }

  // Starts the GETs of extent q's pieces in the files of its first and its last sample.
  void PrefetchExtent(uint64_t q) {
    const uint64_t s = loader_.extent_samples_;
    const uint64_t first = q * s;
    if (first >= dataset_.num_samples()) return;
    const uint64_t last = std::min(first + s, dataset_.num_samples()) - 1;
    Dataset::StoredLocation a, b;
    bool found_a = false, found_b = false;
    if (!GuardedLocate(dataset_, first, &a, &found_a) ||
        !GuardedLocate(dataset_, last, &b, &found_b) || !found_a || !found_b) {
      return;
    }
    Span piece;
    if (ExtentPiece(q, first, a.file, &piece)) reader_.Prefetch(a.file, piece.start, piece.length);
    if (b.file != a.file && ExtentPiece(q, last, b.file, &piece)) {
      reader_.Prefetch(b.file, piece.start, piece.length);
    }
  }

  // The piece of extent q in `file`, which holds extent sample `index`: the run of the
  // extent's samples around `index` that lie in `file` (one binary search each way when the
  // extent spans files). False when the extent is past the dataset's end, an index entry
  // cannot be read, or the piece's records are not in offset order.
  bool ExtentPiece(uint64_t q, uint64_t index, uint32_t file, Span* out) {
    const uint64_t s = loader_.extent_samples_;
    const uint64_t first = q * s;
    if (first >= dataset_.num_samples() || index < first) return false;
    const uint64_t last = std::min(first + s, dataset_.num_samples()) - 1;
    if (index > last) return false;
    // 1: sample i is in `file`, 0: it is not, -1: its entry cannot be read.
    auto in_file = [&](uint64_t i, Dataset::StoredLocation* loc) {
      bool found = false;
      if (!GuardedLocate(dataset_, i, loc, &found) || !found) return -1;
      return loc->file == file ? 1 : 0;
    };
    // Samples are stored in order, so the extent's samples in `file` are one run: from `in`
    // (in `file`) towards `out_of` (not in it), the last one still in `file` is found by
    // halving, its location in `*loc`. False when an entry cannot be read.
    auto run_end = [&](uint64_t in, uint64_t out_of, Dataset::StoredLocation* loc) {
      for (uint64_t gap; (gap = in > out_of ? in - out_of : out_of - in) > 1;) {
        const uint64_t mid = std::min(in, out_of) + gap / 2;
        const int r = in_file(mid, loc);
        if (r < 0) return false;
        (r == 1 ? in : out_of) = mid;
      }
      return in_file(in, loc) == 1;
    };
    Dataset::StoredLocation a, b;
    const int at_first = in_file(first, &a), at_last = in_file(last, &b);
    if (at_first < 0 || at_last < 0) return false;
    if (at_first == 0 && !run_end(index, first, &a)) return false;  // the run's first sample
    if (at_last == 0 && !run_end(index, last, &b)) return false;    // and its last
    if (b.offset + b.size <= a.offset) return false;
    *out = {a.offset, b.offset + b.size - a.offset};
    return true;
  }

  void Submit() {
    max_in_flight_ = std::max<uint64_t>(max_in_flight_, reader_.in_flight());
    Status s = reader_.Submit();
    // io_uring_submit fails only for a broken ring: fail every task held, so no batch waits for
    // reads that will not come.
    if (!s.ok()) FailHeld(s);
  }

  // Fails every task held at its first position with `status` (a ring failure), naming that
  // position's sample.
  void FailHeld(const Status& status) {
    for (uint32_t i = 0; i < count_; ++i) {
      Task& t = tasks_[seq_[i]];
      t.Fail(t.begin, status.WithContext(dataset_.SampleLocation(t.slot->indices[t.begin])));
    }
  }

  // Finishes the tasks whose reads are all done, adding their counters to stats_ under mu_.
  // `lock` is released on entry and on return. Returns true when it finished any.
  bool FinishDoneTasks(std::unique_lock<std::mutex>& lock) {
    bool finished = false;
    for (uint32_t i = 0; i < count_;) {
      Task& t = tasks_[seq_[i]];
      if (!t.done()) {
        ++i;
        continue;
      }
      const uint64_t now = NowNs(), cpu = ThreadCpuNs();
      lock.lock();
      AddStatsLocked(now, cpu);
      loader_.FinishTaskLocked(*t.slot, std::move(t.error));
      lock.unlock();
      StartMarks(now, cpu);
      augment_ns_ = reads_ = read_bytes_ = 0;
      t.slot = nullptr;
      if (i == 0 && count_ == 2) seq_[0] = seq_[1];
      --count_;
      finished = true;
    }
    return finished;
  }

  // Starts timing the next chunk at wall time `now_ns` and thread CPU time `cpu_ns`.
  void StartMarks(uint64_t now_ns, uint64_t cpu_ns) {
    mark_ns_ = now_ns;
    mark_cpu_ns_ = cpu_ns;
    zstd_ns_mark_ = decoder_.zstd_ns();
    zstd_records_mark_ = decoder_.zstd_records();
  }

  // Adds the finished chunk's time and counters to stats_. Requires mu_ held.
  void AddStatsLocked(uint64_t now_ns, uint64_t cpu_ns) {
    LoaderStats& stats = loader_.stats_;
    stats.fetch_ns += now_ns - mark_ns_;
    stats.fetch_cpu_ns += cpu_ns - mark_cpu_ns_;
    stats.decompress_ns += decoder_.zstd_ns() - zstd_ns_mark_;
    stats.zstd_records += decoder_.zstd_records() - zstd_records_mark_;
    stats.augment_ns += augment_ns_;
    stats.direct_reads += reads_;
    stats.direct_read_bytes += read_bytes_;
    stats.direct_max_in_flight = std::max(stats.direct_max_in_flight, max_in_flight_);
    stats.requests.Add(reader_.TakeRequestStats());
    loader_.CheckRequestRateLocked(now_ns);
  }

  // Blocks until one read completes and decodes it. When the ring itself fails (not a read),
  // fails what is held and abandons its reads, so no batch waits forever.
  void WaitForOneRead() {
    uint32_t buffer = 0;
    int64_t result = 0;
    Status waited = reader_.Wait(&buffer, &result);
    if (waited.ok()) {
      CompleteRead(buffer, result);
      reader_.Release(buffer);  // decoded: a block it was read from may be evicted
      return;
    }
    FailHeld(waited);
    for (uint32_t i = 0; i < count_; ++i) {
      Task& t = tasks_[seq_[i]];
      t.issued = t.order.size();
      t.outstanding = 0;
    }
  }

  // Takes the read into `buffer` (`result`: bytes read, or -errno): frees the buffer, and
  // decodes the record, or records why it cannot be.
  void CompleteRead(uint32_t buffer, int64_t result) {
    free_buffers_.push_back(buffer);
    const Pending p = pending_[buffer];
    Task& t = tasks_[p.task];
    --t.outstanding;
    const uint64_t index = t.slot->indices[p.k];
    const Dataset::StoredLocation& loc = t.locations[p.k - t.begin];
    const uint64_t need = loc.offset + loc.size - p.start;
    if (result >= 0) {
      ++reads_;
      read_bytes_ += static_cast<uint64_t>(result);
    }
    if (result < 0 || static_cast<uint64_t>(result) < need) {
      t.Fail(p.k, ReadError(index, loc, p.start, need, result, reader_.ErrorDetail(buffer)));
      return;
    }
    if (p.k >= t.error_k) return;  // positions past a failure are not needed
    loader_.NameSample(&decoder_, index);
    Status s = GuardedDecode(dataset_, index, reader_.data(buffer) + (loc.offset - p.start),
                             loc.size, &decoder_, Output(*t.slot, p.k), &t.slot->labels[p.k]);
    Place(t, p.k, std::move(s));
  }

  // The error of a read of `need` bytes at `start` for sample `index` that failed (`result`
  // -errno) or came back short (`result` bytes).
  // `detail`: what the reader knows beyond the errno (a remote read: URL, HTTP status, the
  // server's error).
  Status ReadError(uint64_t index, const Dataset::StoredLocation& loc, uint64_t start,
                   uint64_t need, int64_t result, const std::string& detail) const {
    if (result < 0) {
      return Status::IOError(
          dataset_.SampleLocation(index) + ": read of " + std::to_string(need) +
          " bytes at offset " + std::to_string(start) + " of " + reader_.object_name(loc.file) +
          " failed: " + (detail.empty() ? std::strerror(static_cast<int>(-result)) : detail));
    }
    return Status::IOError(dataset_.SampleLocation(index) + ": the file could not be read (" +
                           std::to_string(result) + " of " + std::to_string(need) +
                           " bytes at offset " + std::to_string(start) +
                           "): it was truncated or replaced while open, or its storage failed");
  }

  Loader& loader_;
  const Dataset& dataset_;
  RangeReader& reader_;
  const bool augment_;
  const uint64_t out_bytes_;
  RecordDecoder decoder_;
  std::vector<uint8_t> scratch_;             // the stored sample, when augmenting
  std::unique_ptr<JpegSampleDecoder> jpeg_;  // JPEG records: decoder_'s image decoder
  // Two task objects that never move (pending reads name them by id); seq_ lists the count_ ids
  // held, oldest first.
  Task tasks_[2];
  uint32_t seq_[2] = {0, 1};
  uint32_t count_ = 0;
  std::vector<Pending> pending_;  // [buffer]
  std::vector<uint32_t> free_buffers_;
  // BlockExtent's last extent piece: the extent's number, whether the piece is known, the file
  // it was asked for, whether the extent has a piece there (else records are read one by one)
  // and its bytes.
  uint64_t extent_block_ = UINT64_MAX;
  bool extent_known_ = false;
  bool extent_ok_ = false;
  uint32_t extent_file_ = 0;
  Span extent_;
  // The current chunk's start marks, and its counters since.
  uint64_t mark_ns_ = 0, mark_cpu_ns_ = 0, zstd_ns_mark_ = 0, zstd_records_mark_ = 0;
  uint64_t augment_ns_ = 0, reads_ = 0, read_bytes_ = 0, max_in_flight_ = 0;
};

void Loader::DirectWorkerLoop(RangeReader* reader) { DirectWorker(*this, reader).Run(); }

}  // namespace kiln
