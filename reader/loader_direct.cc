// Loader's direct io path (LoaderOptions::io = kDirect): the fetch-thread loop that reads
// records through the thread's DirectQueue (reader/direct_reader.h) instead of the mappings.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "formats/fault_guard.h"
#include "reader/loader.h"

namespace kiln {

namespace {

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

uint64_t ThreadCpuNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

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

void Loader::DirectWorkerLoop(DirectQueue* queue) {
  const bool augment = options_.augment.enabled();
  const uint64_t out_bytes = out_schema_.sample_bytes();
  RecordDecoder decoder;
  std::vector<uint8_t> scratch(augment ? dataset_->schema().sample_bytes() : 0);
  // One chunk being read; a thread holds at most two: the one finishing and the next.
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
  // Two task objects that never move (pending reads name them by id); seq lists the ids held,
  // oldest first.
  Task tasks[2];
  uint32_t seq[2] = {0, 1};
  uint32_t count = 0;
  std::vector<Pending> pending(queue->depth());
  std::vector<uint32_t> free_buffers;
  for (uint32_t i = queue->depth(); i-- > 0;) free_buffers.push_back(i);
  uint64_t mark_ns = 0, mark_cpu = 0, zstd_ns_mark = 0, zstd_records_mark = 0;
  uint64_t augment_ns = 0, reads = 0, read_bytes = 0, max_in_flight = 0;

  // Claims the next task with mu_ held; returns its id. The caller prepares it unlocked.
  const auto claim = [&]() -> uint32_t {
    uint64_t b = 0;
    uint32_t chunk = 0;
    ClaimTaskLocked(&b, &chunk);
    ++busy_;
    const uint32_t id = count == 0 ? 0 : 1 - seq[0];
    seq[count++] = id;
    Task& t = tasks[id];
    t.slot = &slots_[b % slots_.size()];
    t.begin = std::min(t.slot->size, chunk * chunk_samples_);
    t.end = std::min(t.slot->size, t.begin + chunk_samples_);
    return id;
  };
  // Looks up the task's records; those that cannot be read directly (a damaged index entry, a
  // fault) are read, or reported, through the mapping as FillChunk would.
  const auto prepare = [&](Task& t) {
    Slot& slot = *t.slot;
    t.order.clear();
    t.issued = 0;
    t.outstanding = 0;
    t.error = Status::Ok();
    t.error_k = UINT32_MAX;
    if (t.begin == t.end) return;
    sampler_.BatchSamples(slot.batch, t.begin, t.end, slot.indices.data() + t.begin,
                          slot.is_padding.data() + t.begin);
    t.locations.resize(t.end - t.begin);
    for (uint32_t k = t.begin; k < t.end; ++k) {
      const uint64_t index = slot.indices[k];
      Dataset::StoredLocation& loc = t.locations[k - t.begin];
      bool found = false;
      if (!GuardedLocate(*dataset_, index, &loc, &found)) {
        t.Fail(k, SigbusError(*dataset_, index));
        continue;
      }
      if (found) {
        const uint32_t align = direct_files_->alignment(loc.file);
        const uint64_t start = loc.offset / align * align;
        found = AlignUp(loc.offset + loc.size, align) - start <= queue->buffer_bytes();
      }
      if (!found) {
        uint8_t* out = augment ? scratch.data() : slot.data + k * out_bytes;
        Status s = GuardedReadSample(*dataset_, index, &decoder, out, &slot.labels[k]);
        if (!s.ok()) {
          t.Fail(k, std::move(s));
        } else if (augment) {
          AugmentIntoSlot(slot, k, scratch.data(), &augment_ns);
        }
        continue;
      }
      t.order.push_back(k);
    }
    // Reads in file order: adjacent records of one submission merge into one device request
    // (block and dataset order), and random ones reach the device sorted. The order of reads
    // never changes where a sample lands.
    std::sort(t.order.begin(), t.order.end(), [&](uint32_t a, uint32_t b) {
      const Dataset::StoredLocation& x = t.locations[a - t.begin];
      const Dataset::StoredLocation& y = t.locations[b - t.begin];
      return x.file != y.file ? x.file < y.file : x.offset < y.offset;
    });
  };

  // mu_ is held at the top of each iteration.
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (count == 0) {
      const uint64_t wait_start = NowNs();
      work_cv_.wait(lock, [this] { return stop_ || TaskClaimableLocked(); });
      if (stop_) return;
      stats_.slot_wait_ns += NowNs() - wait_start;
      const uint32_t id = claim();
      lock.unlock();
      mark_ns = NowNs();
      mark_cpu = ThreadCpuNs();
      zstd_ns_mark = decoder.zstd_ns();
      zstd_records_mark = decoder.zstd_records();
      prepare(tasks[id]);
    } else {
      lock.unlock();
    }
    // Issue reads into every free buffer, the older task's first.
    bool queued = false;
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t id = seq[i];
      Task& t = tasks[id];
      while (t.issued < t.order.size() && !free_buffers.empty()) {
        const uint32_t k = t.order[t.issued++];
        const Dataset::StoredLocation& loc = t.locations[k - t.begin];
        const uint32_t align = direct_files_->alignment(loc.file);
        const uint64_t start = loc.offset / align * align;
        const uint64_t length = AlignUp(loc.offset + loc.size, align) - start;
        const uint32_t buffer = free_buffers.back();
        free_buffers.pop_back();
        pending[buffer] = Pending{id, k, start};
        queue->Queue(buffer, direct_files_->fd(loc.file), start, static_cast<uint32_t>(length));
        ++t.outstanding;
        queued = true;
      }
    }
    if (queued) {
      max_in_flight = std::max<uint64_t>(max_in_flight, queue->in_flight());
      Status s = queue->Submit();
      if (!s.ok()) {
        // io_uring_submit fails only for a broken ring: fail every task held, so no batch
        // waits for reads that will not come.
        for (uint32_t i = 0; i < count; ++i) {
          Task& t = tasks[seq[i]];
          t.Fail(t.begin, s.WithContext(dataset_->SampleLocation(t.slot->indices[t.begin])));
        }
      }
    }
    // Claim the next chunk while this one's last reads are in flight: the queue stays full
    // across chunks.
    if (count == 1 && tasks[seq[0]].issued == tasks[seq[0]].order.size() && !free_buffers.empty()) {
      lock.lock();
      if (!stop_ && TaskClaimableLocked()) {
        const uint32_t id = claim();
        lock.unlock();
        prepare(tasks[id]);
        lock.lock();
        continue;  // issue its reads
      }
      lock.unlock();
    }
    // Finish the tasks whose reads are all done.
    bool finished = false;
    for (uint32_t i = 0; i < count;) {
      Task& t = tasks[seq[i]];
      if (!t.done()) {
        ++i;
        continue;
      }
      const uint64_t now = NowNs(), cpu = ThreadCpuNs();
      lock.lock();
      stats_.fetch_ns += now - mark_ns;
      stats_.fetch_cpu_ns += cpu - mark_cpu;
      stats_.decompress_ns += decoder.zstd_ns() - zstd_ns_mark;
      stats_.zstd_records += decoder.zstd_records() - zstd_records_mark;
      stats_.augment_ns += augment_ns;
      stats_.direct_reads += reads;
      stats_.direct_read_bytes += read_bytes;
      stats_.direct_max_in_flight = std::max(stats_.direct_max_in_flight, max_in_flight);
      FinishTaskLocked(*t.slot, std::move(t.error));
      lock.unlock();
      mark_ns = now;
      mark_cpu = cpu;
      zstd_ns_mark = decoder.zstd_ns();
      zstd_records_mark = decoder.zstd_records();
      augment_ns = reads = read_bytes = 0;
      t.slot = nullptr;
      if (i == 0 && count == 2) seq[0] = seq[1];
      --count;
      finished = true;
    }
    if (finished || queue->in_flight() == 0) {
      lock.lock();
      continue;
    }
    uint32_t buffer = 0;
    int64_t result = 0;
    Status waited = queue->Wait(&buffer, &result);
    if (!waited.ok()) {
      // The ring itself failed (not a read): fail what is in flight, so no batch waits forever.
      for (uint32_t i = 0; i < count; ++i) {
        Task& t = tasks[seq[i]];
        t.Fail(t.begin, waited.WithContext(dataset_->SampleLocation(t.slot->indices[t.begin])));
        t.issued = t.order.size();
        t.outstanding = 0;
      }
      lock.lock();
      continue;
    }
    free_buffers.push_back(buffer);
    const Pending p = pending[buffer];
    Task& t = tasks[p.task];
    --t.outstanding;
    Slot& slot = *t.slot;
    const uint64_t index = slot.indices[p.k];
    const Dataset::StoredLocation& loc = t.locations[p.k - t.begin];
    const uint64_t need = loc.offset + loc.size - p.start;
    if (result < 0) {
      t.Fail(p.k, Status::IOError(dataset_->SampleLocation(index) + ": read of " +
                                  std::to_string(need) + " bytes at offset " +
                                  std::to_string(p.start) + " of " + direct_files_->path(loc.file) +
                                  " failed: " + std::strerror(static_cast<int>(-result))));
    } else if (static_cast<uint64_t>(result) < need) {
      ++reads;
      read_bytes += static_cast<uint64_t>(result);
      t.Fail(p.k,
             Status::IOError(dataset_->SampleLocation(index) + ": the file could not be read (" +
                             std::to_string(result) + " of " + std::to_string(need) +
                             " bytes at offset " + std::to_string(p.start) +
                             "): it was truncated or replaced while open, or its storage "
                             "failed"));
    } else {
      ++reads;
      read_bytes += static_cast<uint64_t>(result);
      if (p.k < t.error_k) {  // positions past a failure are not needed
        uint8_t* out = augment ? scratch.data() : slot.data + p.k * out_bytes;
        Status s = GuardedDecode(*dataset_, index, queue->buffer(buffer) + (loc.offset - p.start),
                                 loc.size, &decoder, out, &slot.labels[p.k]);
        if (!s.ok()) {
          t.Fail(p.k, std::move(s));
        } else if (augment) {
          AugmentIntoSlot(slot, p.k, scratch.data(), &augment_ns);
        }
      }
    }
    lock.lock();
  }
}

}  // namespace kiln
