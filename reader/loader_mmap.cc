// Loader's mmap io path (LoaderOptions::io = kMmap): the fetch-thread loop that decodes records
// in place from the dataset's file mappings, and the madvise read-ahead that keeps reads in
// flight while they miss the page cache ("The read path" and "Memory bounds" in
// reader/loader.md).
#include <algorithm>
#include <new>
#include <vector>

#include "formats/fault_guard.h"
#include "formats/mapped_file.h"
#include "reader/loader.h"
#include "reader/loader_clock.h"

namespace kiln {

void Loader::WorkerLoop(RangeReader* reader) {
  if (reader != nullptr) return DirectWorkerLoop(reader);
  RecordDecoder decoder;
  const std::unique_ptr<JpegSampleDecoder> jpeg = MakeJpegDecoder();
  decoder.set_image_decoder(jpeg.get());
  std::vector<uint8_t> scratch;
  std::vector<uint64_t> ahead_indices;
  std::vector<uint8_t> ahead_padding;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    const uint64_t wait_start = NowNs();
    work_cv_.wait(lock, [this] { return stop_ || TaskClaimableLocked(); });
    if (stop_) return;
    stats_.slot_wait_ns += NowNs() - wait_start;
    uint64_t b = 0;
    uint32_t chunk = 0;
    ClaimTaskLocked(&b, &chunk);
    Slot& slot = slots_[b % slots_.size()];
    uint64_t ahead_begin = 0, ahead_end = 0;
    ExtendReadAheadLocked(b, chunk, &ahead_begin, &ahead_end);
    ++busy_;
    lock.unlock();
    ReadAheadResult ahead;
    uint64_t ahead_ns = 0;
    if (ahead_end > ahead_begin) {
      const uint64_t ahead_start = NowNs();
      ahead = ReadAhead(ahead_begin, ahead_end, &ahead_indices, &ahead_padding);
      ahead_ns = NowNs() - ahead_start;
    }
    const uint64_t fetch_start = NowNs();
    const uint64_t cpu_start = ThreadCpuNs();
    const uint64_t zstd_ns_before = decoder.zstd_ns();
    const uint64_t zstd_records_before = decoder.zstd_records();
    uint64_t augment_ns = 0;
    Status status;
    try {
      status = FillChunk(slot, b, chunk, &decoder, &scratch, &augment_ns);
    } catch (const std::bad_alloc&) {
      status =
          Status::OutOfRange("Loader over " + dataset_->dir() + ": out of memory filling batch " +
                             std::to_string(b) + " of epoch " + std::to_string(sampler_.epoch()) +
                             " (augmentation or decompression buffers of " +
                             std::to_string(dataset_->schema().sample_bytes()) +
                             " bytes a thread); lower num_threads or raise the memory limit");
    }
    const uint64_t cpu_ns = ThreadCpuNs() - cpu_start;
    const uint64_t fetch_ns = NowNs() - fetch_start;
    lock.lock();
    stats_.fetch_ns += fetch_ns;
    stats_.fetch_cpu_ns += cpu_ns;
    stats_.decompress_ns += decoder.zstd_ns() - zstd_ns_before;
    stats_.zstd_records += decoder.zstd_records() - zstd_records_before;
    stats_.augment_ns += augment_ns;
    stats_.read_ahead_samples += ahead.samples;
    stats_.read_ahead_bytes += ahead.bytes;
    stats_.read_ahead_ns += ahead_ns;
    if (ahead.probed) {
      ++stats_.residency_probes;
      stats_.residency_misses += ahead.missed;
    }
    FinishTaskLocked(slot, std::move(status));
  }
}

void Loader::ExtendReadAheadLocked(uint64_t b, uint32_t chunk, uint64_t* ahead_begin,
                                   uint64_t* ahead_end) {
  // The claiming thread advises what it adds. The frontier only moves forward, so each sample
  // is advised at most once a pass.
  if (read_ahead_samples_window_ == 0) return;
  if (options_.shuffle == ShuffleMode::kBlock) {
    // Block order reads the samples of a window of blocks in random order: advise whole
    // blocks (one sequential run each): the window(s) the batch reads from, which must be
    // in memory anyway, and read_ahead_bytes of blocks past them.
    uint64_t first = 0, end = 0;
    sampler_.BatchBlocks(b, &first, &end);
    const uint64_t block = std::max<uint64_t>(1, sampler_.block_samples());
    const uint64_t target =
        std::min(sampler_.rank_blocks(), end + (read_ahead_samples_window_ + block - 1) / block);
    if (target > read_ahead_until_) {
      *ahead_begin = read_ahead_until_;
      *ahead_end = target;
      read_ahead_until_ = target;
      stats_.read_ahead_max_lead_samples =
          std::max(stats_.read_ahead_max_lead_samples, (target - first) * block);
    }
    return;
  }
  const uint64_t start =
      std::min(epoch_positions_, b * options_.batch_size + uint64_t{chunk} * chunk_samples_);
  // The window covers at least this chunk, so no position is skipped when it is narrower
  // than a chunk.
  const uint64_t target = std::min(
      epoch_positions_, start + std::max<uint64_t>(read_ahead_samples_window_, chunk_samples_));
  if (target > read_ahead_until_) {
    *ahead_begin = read_ahead_until_;
    *ahead_end = target;
    read_ahead_until_ = target;
    stats_.read_ahead_max_lead_samples =
        std::max(stats_.read_ahead_max_lead_samples, target - start);
  }
}

Loader::ReadAheadResult Loader::ReadAhead(uint64_t ahead_begin, uint64_t ahead_end,
                                          std::vector<uint64_t>* ahead_indices,
                                          std::vector<uint8_t>* ahead_padding) {
  ReadAheadResult ahead = ProbeAhead(ahead_begin, ahead_end);
  uint64_t history = miss_history_.load(std::memory_order_relaxed);
  if (ahead.probed) {
    uint64_t next;
    do {
      next = (history << 1) | (ahead.missed ? 1 : 0);
    } while (!miss_history_.compare_exchange_weak(history, next, std::memory_order_relaxed));
    history = next;
  }
  if (history == 0) return ahead;  // none of the last 64 probes missed: reads stay in memory
  // Random or sequential advice turns off the kernel's read-around of each fault and stops
  // reclaim from favouring pages already read through the mapping over pages read ahead and not
  // yet used (formats/mapped_file.h). Given once, when reads first miss, so data in memory
  // keeps the kernel's defaults.
  std::call_once(access_advised_, [this] {
    dataset_->AdviseAccess(options_.shuffle == ShuffleMode::kExact ? AccessAdvice::kRandom
                                                                   : AccessAdvice::kSequential);
  });
  // The extension is advised in pieces of at most kAdvisePieceSamples samples, carrying the
  // current run of neighbouring records from one piece to the next, so the scratch lists stay
  // bounded whatever the extension's length. An extension can span the whole epoch (1-byte
  // samples make read_ahead_bytes / sample_bytes 16 M samples), and lists of all its indices
  // grew the process by 9 bytes per sample on a cold read (LoaderColdMemoryTest).
  constexpr uint64_t kAdvisePieceSamples = 4096;
  MappedRange run;
  try {
    if (options_.shuffle == ShuffleMode::kBlock) {
      for (uint64_t j = ahead_begin; j < ahead_end; ++j) {
        const SampleRange r = sampler_.RankBlock(j);
        for (uint64_t i = 0; i < r.count; i += kAdvisePieceSamples) {
          const uint64_t n = std::min(kAdvisePieceSamples, r.count - i);
          ahead_indices->resize(n);
          for (uint64_t k = 0; k < n; ++k) (*ahead_indices)[k] = r.begin + i + k;
          if (!AdviseAhead(*ahead_indices, &run, &ahead)) return ahead;
        }
      }
    } else {
      for (uint64_t p = ahead_begin; p < ahead_end; p += kAdvisePieceSamples) {
        const uint64_t piece_end = std::min(ahead_end, p + kAdvisePieceSamples);
        PositionIndices(p, piece_end, ahead_indices, ahead_padding);
        if (!AdviseAhead(*ahead_indices, &run, &ahead)) return ahead;
        if (ahead_indices->size() < piece_end - p) break;  // the epoch's last batch ended
      }
    }
  } catch (const std::bad_alloc&) {
    ahead_indices->clear();  // advice is an optimisation: go without the rest
  }
  AdviseWillNeed(run);
  return ahead;
}

void Loader::PositionIndices(uint64_t begin, uint64_t end, std::vector<uint64_t>* indices,
                             std::vector<uint8_t>* padding) const {
  const uint64_t batch_size = options_.batch_size;
  indices->resize(end - begin);
  padding->resize(end - begin);
  uint64_t p = begin;
  while (p < end) {
    const uint64_t b = p / batch_size;
    const uint32_t k = static_cast<uint32_t>(p % batch_size);
    const uint32_t k_end = static_cast<uint32_t>(std::min<uint64_t>(
        std::min<uint64_t>(batch_size, end - b * batch_size), sampler_.BatchSize(b)));
    if (k_end <= k) break;
    sampler_.BatchSamples(b, k, k_end, indices->data() + (p - begin),
                          padding->data() + (p - begin));
    p += k_end - k;
  }
  indices->resize(p - begin);
}

Loader::ReadAheadResult Loader::ProbeAhead(uint64_t begin, uint64_t end) const {
  // Up to 4 samples spread over the extension, found one by one (O(1) each), so that an
  // extension that is not advised costs a few lookups and mincore calls, not one per sample.
  // Spread, because in dataset order the first samples of a shard are often resident: the
  // kernel read around its header at open.
  constexpr uint64_t kProbes = 4;
  const uint64_t units = end - begin;
  const uint64_t probes = std::min(units, kProbes);
  uint64_t idx[kProbes];
  uint8_t padding = 0;
  uint64_t found = 0;
  for (uint64_t p = 0; p < probes; ++p) {
    const uint64_t u = begin + p * units / probes;
    if (options_.shuffle == ShuffleMode::kBlock) {
      const SampleRange r = sampler_.RankBlock(u);
      if (r.count > 0) idx[found++] = r.begin + r.count / 2;
    } else {
      const uint64_t b = u / options_.batch_size;
      const uint32_t k = static_cast<uint32_t>(u % options_.batch_size);
      if (k < sampler_.BatchSize(b)) sampler_.BatchSamples(b, k, k + 1, &idx[found++], &padding);
    }
  }
  ReadAheadResult result;
  // StoredRange reads index entries from the mapping: a shrunken file faults here. Stop then;
  // the fetch of that sample reports the error by name.
  MappedReadFaultScope fault_scope;
  if (KILN_MAPPED_READ_FAULTED(fault_scope)) return {};  // `result` is not volatile: drop it
  for (uint64_t p = 0; p < found && !result.missed; ++p) {
    const MappedRange r = dataset_->StoredRange(idx[p]);
    if (r.empty()) continue;
    result.probed = true;
    result.missed = !IsResident(r);
  }
  return result;
}

bool Loader::AdviseAhead(const std::vector<uint64_t>& indices, MappedRange* run,
                         ReadAheadResult* result) const {
  if (indices.empty()) return true;
  MappedReadFaultScope fault_scope;  // as in ProbeAhead
  if (KILN_MAPPED_READ_FAULTED(fault_scope)) return false;
  const uint64_t* idx = indices.data();
  const uint64_t count = indices.size();
  // Neighbouring records (block or sequential order) are advised as one run: fewer calls and
  // one large read for the kernel to issue.
  for (uint64_t i = 0; i < count; ++i) {
    const MappedRange r = dataset_->StoredRange(idx[i]);
    if (r.empty()) continue;
    ++result->samples;
    result->bytes += r.size;
    if (!run->empty() && r.data >= run->data + run->size &&
        r.data - (run->data + run->size) < 4096) {
      run->size = static_cast<uint64_t>(r.data + r.size - run->data);
      continue;
    }
    AdviseWillNeed(*run);
    *run = r;
  }
  return true;
}

Status Loader::FillChunk(Slot& slot, uint64_t batch, uint32_t chunk, RecordDecoder* decoder,
                         std::vector<uint8_t>* scratch, uint64_t* augment_ns) {
  const uint32_t begin = std::min(slot.size, chunk * chunk_samples_);
  const uint32_t end = std::min(slot.size, begin + chunk_samples_);
  if (begin == end) return Status::Ok();
  sampler_.BatchSamples(batch, begin, end, slot.indices.data() + begin,
                        slot.is_padding.data() + begin);
  const TensorSchema& stored = dataset_->schema();
  const uint64_t out_bytes = out_schema_.sample_bytes();
  // JPEG records are decoded, cropped and resized into the slot in one step.
  const bool augment = options_.augment.enabled() && !dataset_->jpeg_records();
  if (augment) scratch->resize(stored.sample_bytes());
  // Random reads miss the CPU cache: prefetch the index entry kEntryAhead samples ahead and the
  // payload kPayloadAhead samples ahead (its entry is in cache by then).
  constexpr uint32_t kEntryAhead = 8, kPayloadAhead = 4;
  // A mapped file that shrinks or fails under us raises SIGBUS: report it against the sample
  // being read instead of dying (field case B27).
  MappedReadFaultScope fault_scope;
  volatile uint32_t current = begin;
  if (KILN_MAPPED_READ_FAULTED(fault_scope)) {
    const uint64_t index = slot.indices[current];
    return Status::IOError(
               "the mapped file could not be read (SIGBUS): it was truncated or "
               "replaced while open, or its storage failed")
        .WithLocation(dataset_->SampleErrorLocation(index), dataset_->SampleLocation(index));
  }
  // A mixture's sample k is read from its source directly: each index is resolved to (source,
  // index in the source) once here, into the slot's lists that Next() hands out. Through
  // MixtureDataset, the sample's two prefetches and its read each found the source again, and
  // Next() once more: 6 virtual calls and 4 source searches a sample, now 3 and 1. The source's
  // own errors name its file and record either way.
  const MixtureDataset* joined = nullptr;
  const uint64_t* local = slot.indices.data();
  if (mixture_ != nullptr) {
    joined = static_cast<const MixtureDataset*>(dataset_.get());
    for (uint32_t k = begin; k < end; ++k) {
      const uint32_t s = mixture_->SourceOfIndex(slot.indices[k]);
      slot.sources[k] = s;
      slot.source_indices[k] = slot.indices[k] - mixture_->offset(s);
    }
    local = slot.source_indices.data();
  }
  const auto dataset_of = [&](uint32_t k) -> const Dataset* {
    return joined != nullptr ? &joined->source(slot.sources[k]) : dataset_.get();
  };
  for (uint32_t k = begin; k < std::min(end, begin + kEntryAhead); ++k) {
    dataset_of(k)->Prefetch(local[k], k < begin + kPayloadAhead);
  }
  for (uint32_t k = begin; k < end; ++k) {
    current = k;
    if (k + kEntryAhead < end) dataset_of(k + kEntryAhead)->Prefetch(local[k + kEntryAhead], false);
    if (k + kPayloadAhead < end) {
      dataset_of(k + kPayloadAhead)->Prefetch(local[k + kPayloadAhead], true);
    }
    const uint64_t index = slot.indices[k];
    uint8_t* out = slot.data + k * out_bytes;
    NameSample(decoder, index);
    KILN_RETURN_IF_ERROR(dataset_of(k)->ReadSample(
        local[k], decoder, augment ? scratch->data() : out, &slot.labels[k]));
    if (augment) AugmentIntoSlot(slot, k, scratch->data(), augment_ns);
  }
  return Status::Ok();
}

}  // namespace kiln
