#include "reader/loader.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <set>
#include <system_error>

#include "formats/byte_coding.h"
#include "formats/fault_guard.h"
#include "formats/manifest.h"
#include "reader/device_ops.h"
#include "reader/device_ring.h"
#include "reader/fetch_schedule.h"
#include "reader/loader_clock.h"
#include "reader/stats_export.h"
#if KILN_HAVE_REMOTE
#include "reader/remote/block_cache.h"
#include "reader/remote/disk_cache.h"
#include "reader/remote/remote_dataset.h"
#endif

namespace kiln {

namespace {

constexpr uint64_t kSlotAlign = 4096;

uint64_t BlockSamples(const TensorSchema& stored, uint64_t block_bytes) {
  return std::max<uint64_t>(1, block_bytes / std::max<uint64_t>(1, stored.sample_bytes()));
}

// Prints each distinct warning once per process on stderr.
void WarnOnce(const std::string& message) {
  static std::mutex mu;
  static std::set<std::string>* printed = new std::set<std::string>();  // never destroyed
  std::lock_guard<std::mutex> lock(mu);
  if (printed->insert(message).second) std::fprintf(stderr, "kiln: %s\n", message.c_str());
}

std::string MiB(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

bool EnableRemoteDatasets() {
#if KILN_HAVE_REMOTE
  remote::InstallRemoteDatasets();
  return true;
#else
  return false;
#endif
}

const char* IoModeName(IoMode mode) {
  switch (mode) {
    case IoMode::kAuto:
      return "auto";
    case IoMode::kMmap:
      return "mmap";
    case IoMode::kDirect:
      return "direct";
    case IoMode::kRemote:
      return "remote";
  }
  return "?";
}

Result<IoMode> ParseIoMode(const std::string& name) {
  if (name == "auto") return IoMode::kAuto;
  if (name == "mmap") return IoMode::kMmap;
  if (name == "direct") return IoMode::kDirect;
  return Status::InvalidArgument("io \"" + name + "\" must be auto, mmap or direct");
}

Status Loader::ChooseRemotePath(uint32_t threads) {
#if KILN_HAVE_REMOTE
  const auto* store = dynamic_cast<const remote::RemoteStore*>(dataset_->file_store());
#else
  const void* store = nullptr;
  (void)threads;
#endif
  if (store == nullptr) {
    // A store of another kind: records are read one at a time through Dataset::ReadSample.
    io_reason_ = "the dataset's files are read through its store, one record at a time";
#if KILN_HAVE_REMOTE
    // A mixture's store reads its sources at a URL through their RemoteStore::ReadRange: one
    // blocking range GET per record, one at a time per source.
    if (const auto* joined = dynamic_cast<const MixtureDataset*>(dataset_.get())) {
      std::string urls;
      for (size_t s = 0; s < joined->num_sources(); ++s) {
        const auto* src = dynamic_cast<const remote::RemoteStore*>(joined->source(s).file_store());
        if (src == nullptr) continue;
        store_reads_.push_back({src, src->read_range_stats()});
        urls += (urls.empty() ? "" : "; ") + std::string("source ") + std::to_string(s) + ", " +
                joined->source(s).dir();
      }
      if (!store_reads_.empty()) {
        io_reason_ = "the mixture's sources at a URL (" + urls +
                     ") are read through their stores, one record at a time (a range GET each, "
                     "one request at a time per source); its local sources through their "
                     "mappings";
      }
    }
#endif
    return Status::Ok();
  }
#if KILN_HAVE_REMOTE
  // A staging buffer holds one record (stored bytes never exceed the raw sample bytes); each
  // read is one range GET, and a thread keeps `depth` of them in flight on its connections.
  const uint64_t buffer_bytes = dataset_->schema().sample_bytes();
  const uint64_t per_thread = options_.read_ahead_bytes / std::max<uint32_t>(1, threads);
  const uint32_t depth = static_cast<uint32_t>(
      std::clamp<uint64_t>(per_thread / std::max<uint64_t>(1, buffer_bytes), 16, 256));
  // Block order: whole blocks, one GET each, shared by the threads; room for a shuffle window of
  // blocks plus two more per thread (those a thread's next chunks start while the window moves).
  // Dataset order on one or two ranks: extents of block_bytes, one GET each, with a read-ahead
  // of read_ahead_bytes in whole extents (2 to 64), so a round trip is paid once per extent
  // ahead rather than once per chunk. More ranks read every W-th sample (sampler.h), so an
  // extent would carry W times the bytes a rank needs: those read their chunks' records
  // merged into GETs as before (at most twice the bytes needed).
  std::shared_ptr<remote::BlockCache> blocks;
  // Hedged requests: the environment's policy (read at open), unless the options say otherwise.
  remote::HedgePolicy hedge = store->options().hedge;
  if (options_.remote_hedge_p95_multiple) hedge.p95_multiple = *options_.remote_hedge_p95_multiple;
  if (options_.remote_hedge_min_ms) hedge.min_ms = *options_.remote_hedge_min_ms;
  // The local cache: the options' directory, else the environment's (read at open).
  const std::string cache_dir =
      options_.remote_cache_dir.empty() ? store->options().cache_dir : options_.remote_cache_dir;
  std::shared_ptr<remote::DiskCache> disk;
  if (!cache_dir.empty()) {
    const uint64_t cache_bytes = options_.remote_cache_bytes.value_or(store->options().cache_bytes);
    KILN_ASSIGN_OR_RETURN(disk, store->OpenDiskCache(cache_dir, cache_bytes));
  }
  const uint64_t sample_bytes = std::max<uint64_t>(1, dataset_->schema().sample_bytes());
  uint64_t extent_samples = 0;
  uint32_t ahead = 0, capacity = 0, receivers = 0, in_flight = 0;
  constexpr uint32_t kExtentsInFlight = 3;
  if (options_.shuffle == ShuffleMode::kBlock) {
    extent_samples = sampler_.block_samples();
    capacity = options_.shuffle_window + 2 * threads + 2;
  }
  // Dataset order on one or two ranks: whole extents read ahead when a round trip is long
  // enough to matter (the open's fastest request took extents_from_us or more); on a faster
  // link a chunk's records merged into GETs are quicker (each fetch thread receives and copies
  // out its own GET while its bytes are still in the CPU's cache, where an extent read ahead
  // has left it: BENCHMARKS.md, "Dataset order at a URL").
  std::string order_note;
  const bool none_order = options_.shuffle == ShuffleMode::kNone && options_.world_size <= 2;
  const int64_t rtt_us = store->open_latency_us();
  const int64_t extents_from_us = store->options().extents_from_us;
  if (none_order && rtt_us < extents_from_us) {
    char text[200];
    std::snprintf(text, sizeof text,
                  "; dataset order: the open's fastest request took %.2f ms, under %.2f ms, so "
                  "a chunk's records are merged into GETs instead of reading whole extents ahead",
                  static_cast<double>(rtt_us) / 1e3, static_cast<double>(extents_from_us) / 1e3);
    order_note = text;
  } else if (none_order) {
    extent_samples = std::max<uint64_t>(1, options_.block_bytes / sample_bytes);
    ahead = static_cast<uint32_t>(
        std::clamp<uint64_t>(options_.read_ahead_bytes / (extent_samples * sample_bytes), 2, 64));
    capacity = 2 * threads + 2 + ahead;
  }
  if (extent_samples != 0) {
    // One receiver per fetch thread (before the cache each fetch thread's client received its
    // own bytes; one receiver would serialise them). In dataset order each receiver keeps
    // kExtentsInFlight GETs in flight and the extents read ahead wait in order, so the extent
    // needed next does not share the bandwidth with all of them (with every one in flight, the
    // first of a small dataset arrived only once the whole dataset had).
    receivers = std::max<uint32_t>(1, threads);
    in_flight = ahead == 0 ? 0 : kExtentsInFlight;
    Result<std::shared_ptr<remote::BlockCache>> made =
        store->NewBlockCache(capacity, receivers, in_flight, hedge, disk);
    if (made.ok()) {
      blocks = std::move(*made);
    } else {
      extent_samples = ahead = 0;
    }
  }
  const uint64_t block_bytes = extent_samples * sample_bytes;
  std::vector<std::unique_ptr<RangeReader>> readers;
  for (uint32_t t = 0; t < threads; ++t) {
    Result<std::unique_ptr<RangeReader>> r =
        store->NewRangeReader(depth, buffer_bytes, blocks, hedge, disk);
    if (!r.ok()) {
      io_reason_ = "the dataset is at a URL, but " + r.status().message() +
                   ": records are read one at a time";
      store_reads_.push_back({store, store->read_range_stats()});
      return Status::Ok();
    }
    readers.push_back(std::move(*r));
  }
  range_readers_ = std::move(readers);
  remote_ = true;
  direct_depth_ = depth;
  extent_samples_ = extent_samples;
  extent_ahead_ = ahead;
  std::string extents;
  if (blocks != nullptr) {
    extents = ", whole " + std::string(ahead == 0 ? "blocks" : "extents") + " of " +
              std::to_string(block_bytes >> 10) + " KiB in one GET each (up to " +
              std::to_string(capacity) + " held";
    extents += ahead == 0 ? ")" : ", " + std::to_string(ahead) + " read ahead)";
    extents += ", received by " + std::to_string(receivers) + " thread" +
               (receivers == 1 ? "" : "s") +
               (in_flight == 0 ? "" : ", " + std::to_string(in_flight) + " GETs in flight each");
  }
  std::string cache_note;
  if (disk != nullptr) {
    remote::RemoteOptions fill_options = store->options();
    fill_options.hedge = hedge;
    disk->StartFill(fill_options);
    disk_cache_ = disk;
    cache_note = "; local cache " + disk->entry_dir() + " (pieces of " +
                 std::to_string(disk->piece_bytes() >> 10) + " KiB, filled in dataset order)";
  }
  io_reason_ = std::string("the dataset is at a URL: range GETs, ") + std::to_string(depth) +
               " in flight per thread" + extents + order_note + cache_note +
               (options_.io == IoMode::kMmap ? " (io mmap asked, but a URL has no mapping)" : "");
#endif
  return Status::Ok();
}

void Loader::CheckRequestRateLocked(uint64_t now_ns) {
#if KILN_HAVE_REMOTE
  if (!remote_ || rate_warned_) return;
  if (rate_mark_ns_ == 0) {
    rate_mark_ns_ = now_ns;
    rate_mark_requests_ = stats_.requests.requests;
    return;
  }
  const uint64_t elapsed_ns = now_ns - rate_mark_ns_;
  if (elapsed_ns < 2'000'000'000ULL) return;
  const double rate = static_cast<double>(stats_.requests.requests - rate_mark_requests_) * 1e9 /
                      static_cast<double>(elapsed_ns);
  rate_mark_ns_ = now_ns;
  rate_mark_requests_ = stats_.requests.requests;
  const std::string warning = remote::RequestRateWarning(dataset_->dir(), rate);
  if (!warning.empty()) {
    rate_warned_ = true;
    WarnOnce(warning);
  }
#else
  (void)now_ns;
#endif
}

Status Loader::ChooseIoPath(uint32_t threads) {
  if (dataset_->file_store() != nullptr) return ChooseRemotePath(threads);
  if (options_.io == IoMode::kMmap) {
    io_reason_ = "io mmap asked";
    return Status::Ok();
  }
  const bool asked = options_.io == IoMode::kDirect;
  const auto fall_back = [&](const std::string& why) {
    io_reason_ = why;
    if (asked) WarnOnce("io direct asked but " + why + "; reading through the file mappings");
    return Status::Ok();
  };
  if (dataset_->data_file_count() == 0) {
    if (mixture_ != nullptr) {
      return fall_back(static_cast<const MixtureDataset&>(*dataset_).NoDirectReadsReason());
    }
    return fall_back("the " + dataset_->manifest().format + " backend has no direct reads");
  }
  std::string why_not;
  if (!DirectIoAvailable(&why_not)) return fall_back(why_not);
  uint64_t dataset_bytes = 0;
  for (const DataFileInfo& f : dataset_->manifest().files) dataset_bytes += f.bytes;
  const uint64_t memory = MemoryLimitBytes();
  std::string reason;
  if (asked) {
    reason = "io direct asked";
  } else if (memory != 0 && dataset_bytes <= memory / 2) {
    io_reason_ = "dataset of " + std::to_string(dataset_bytes >> 20) +
                 " MiB fits in half the memory limit of " + std::to_string(memory >> 20) + " MiB";
    return Status::Ok();
  } else {
    reason = "dataset of " + std::to_string(dataset_bytes >> 20) +
             " MiB > half the memory limit of " + std::to_string(memory >> 20) + " MiB";
  }
  Result<std::unique_ptr<DirectFiles>> files = DirectFiles::Open(*dataset_);
  if (!files.ok()) return fall_back(files.status().message());
  if (!(*files)->all_direct()) {
    if (!asked) {
      io_reason_ = "the filesystem refuses O_DIRECT (" + reason + ")";
      return Status::Ok();
    }
    reason += "; the filesystem refuses O_DIRECT: buffered io_uring reads";
  }
  // A staging buffer holds the aligned range covering the largest record (stored bytes never
  // exceed the raw sample bytes): a record starting anywhere inside an aligned unit.
  const uint64_t align = (*files)->max_alignment();
  const uint64_t buffer_bytes = AlignUp(dataset_->schema().sample_bytes(), align) + align;
  const uint64_t per_thread = options_.read_ahead_bytes / std::max<uint32_t>(1, threads);
  const uint32_t depth = static_cast<uint32_t>(
      std::clamp<uint64_t>(per_thread / AlignUp(buffer_bytes, 4096), 1, 1024));
  std::vector<std::unique_ptr<RangeReader>> readers;
  for (uint32_t t = 0; t < threads; ++t) {
    Result<std::unique_ptr<DirectQueue>> q = DirectQueue::Create(depth, buffer_bytes);
    if (!q.ok()) return fall_back(q.status().message());
    readers.push_back(std::make_unique<UringRangeReader>(**files, std::move(*q)));
  }
  direct_files_ = std::move(*files);  // the readers refer to the files, which do not move
  range_readers_ = std::move(readers);
  direct_depth_ = depth;
  io_reason_ = reason;
  return Status::Ok();
}

Status Loader::DamagedInLocalCache(const Dataset::StoredLocation& loc, Status failed) const {
#if KILN_HAVE_REMOTE
  if (disk_cache_ == nullptr || failed.code() != StatusCode::kCorruption) return failed;
  const std::string file = disk_cache_->DropDamaged(loc.file, loc.offset, loc.size);
  if (file.empty()) return failed;
  return Status::Corruption(
             failed.message() + " (these bytes came from the local cache file " + file +
             ", which is damaged: its pieces holding them are dropped, and the next run "
             "reads them from the network)")
      .WithLocation(failed.location());
#else
  (void)loc;
  return failed;
#endif
}

Status Loader::UploadSlot(size_t slot_index, uint64_t batch, uint32_t size) {
  const Slot& slot = slots_[slot_index];
  return device_->Upload(slot_index, batch, slot.data, uint64_t{size} * out_schema_.sample_bytes(),
                         slot.labels, uint64_t{size} * sizeof(int64_t));
}

void Loader::ReleaseHeld() {
  size_t held = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!holding_) return;
    held = (next_batch_ - 1) % slots_.size();
  }
  if (device_ != nullptr) device_->Release(held);  // without the mutex: the fetch threads go on
  {
    std::lock_guard<std::mutex> lock(mu_);
    holding_ = false;
    schedule_.Release();
  }
  work_cv_.notify_all();
}

Result<std::unique_ptr<DeviceOps::Scope>> Loader::EnterDevice() {
  if (device_ == nullptr) return std::unique_ptr<DeviceOps::Scope>();
  return device_->Enter();
}

void Loader::Release() {
  if (Forked()) return;  // Next() reports it (CheckProcess)
  Result<std::unique_ptr<DeviceOps::Scope>> scope = EnterDevice();
  if (!scope.ok() && device_ != nullptr) device_->KeepError(scope.status());
  ReleaseHeld();
}

Status ValidateLoaderOptions(const LoaderOptions& options) {
  if (options.batch_size < 1) return Status::InvalidArgument("batch_size 0 must be at least 1");
  if (options.world_size < 1) return Status::InvalidArgument("world_size 0 must be at least 1");
  if (options.rank >= options.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) +
                                   " must be below world_size " +
                                   std::to_string(options.world_size));
  }
  if (options.prefetch < 1 || options.prefetch > 64) {
    return Status::InvalidArgument("prefetch " + std::to_string(options.prefetch) +
                                   " must be in [1, 64]");
  }
  if (options.device < -1) {
    return Status::InvalidArgument("device " + std::to_string(options.device) +
                                   " must be -1 (host batches) or a CUDA device index");
  }
  if (options.pin_device < -1) {
    return Status::InvalidArgument("pin_device " + std::to_string(options.pin_device) +
                                   " must be -1 (the current device) or a CUDA device index");
  }
  const double hedge_multiple = options.remote_hedge_p95_multiple.value_or(0);
  const int64_t hedge_min_ms = options.remote_hedge_min_ms.value_or(0);
  if (!(hedge_multiple >= 0 && hedge_multiple <= 1000)) {
    return Status::InvalidArgument("remote_hedge_p95_multiple " + std::to_string(hedge_multiple) +
                                   " must be in [0, 1000] (0 turns hedged requests off)");
  }
  if (hedge_min_ms < 0 || hedge_min_ms > 3600000) {
    return Status::InvalidArgument("remote_hedge_min_ms " + std::to_string(hedge_min_ms) +
                                   " must be in [0, 3600000]");
  }
  if (options.read_ahead_bytes > (uint64_t{4} << 30)) {
    return Status::InvalidArgument("read_ahead_bytes " + std::to_string(options.read_ahead_bytes) +
                                   " must be at most 4 GiB (4294967296)");
  }
  if (options.num_threads > 256) {
    return Status::InvalidArgument("num_threads " + std::to_string(options.num_threads) +
                                   " must be at most 256");
  }
  if (options.block_bytes < 1 || options.block_bytes > (uint64_t{1} << 40)) {
    return Status::InvalidArgument("block_bytes " + std::to_string(options.block_bytes) +
                                   " must be in [1, 2^40]");
  }
  if (options.shuffle_window < 1 || options.shuffle_window > (1u << 20)) {
    return Status::InvalidArgument("shuffle_window " + std::to_string(options.shuffle_window) +
                                   " must be in [1, 1048576] blocks");
  }
  KILN_RETURN_IF_ERROR(
      CheckStatsInterval(options.stats_interval_s, "stats_interval_s", /*zero_allowed=*/true));
  return Status::Ok();
}

std::string BlockMemoryFitWarning(const BlockMemoryFit& fit) {
  if (fit.fits()) return "";
  std::string msg =
      "block order on the mmap path needs its window's blocks plus the read-ahead in memory "
      "(block_bytes x window + read_ahead_bytes, plus the batch slots, must fit in the memory "
      "limit): " +
      MiB(fit.block_bytes) + " x " + std::to_string(fit.window_blocks) + " + " +
      MiB(fit.read_ahead_bytes) + " + " + MiB(fit.slot_bytes) +
      " of slots = " + MiB(fit.needed_bytes()) + " > the memory limit of " +
      MiB(fit.memory_limit_bytes) +
      ": the page cache will thrash (pages evicted before they are read); ";
  // The largest window that fits with these blocks, read-ahead and slots.
  const uint64_t fixed = fit.read_ahead_bytes + fit.slot_bytes;
  const uint64_t room = fit.memory_limit_bytes > fixed ? fit.memory_limit_bytes - fixed : 0;
  const uint64_t window = fit.block_bytes > 0 ? room / fit.block_bytes : 0;
  if (window >= 1) {
    msg += "use a smaller window (shuffle_window " + std::to_string(window) +
           " or less; kiln bench --window) or smaller blocks (block_bytes; --block-kib), ";
  } else {
    msg +=
        "use smaller blocks and window (block_bytes, shuffle_window; kiln bench --block-kib, "
        "--window) and less read-ahead (read_ahead_bytes; --read-ahead-mib), ";
  }
  msg +=
      "or read with io=direct (--io direct), which needs no page cache; larger blocks make "
      "it worse";
  return msg;
}

Result<std::unique_ptr<Loader>> Loader::Open(const std::string& dir, const LoaderOptions& options) {
  if (Dataset::IsUrl(dir)) EnableRemoteDatasets();
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> dataset, Dataset::Open(dir));
  return Create(std::shared_ptr<const Dataset>(std::move(dataset)), options);
}

Result<std::unique_ptr<Loader>> Loader::Create(std::shared_ptr<const Dataset> dataset,
                                               const LoaderOptions& options) {
  return CreateWithDeviceOps(std::move(dataset), options, nullptr);
}

namespace {

Result<Sampler> MakeSampler(const Dataset& dataset, const LoaderOptions& options,
                            std::shared_ptr<const MixtureSchedule> mixture) {
  SamplerOptions so;
  so.num_samples = mixture ? mixture->samples_per_epoch() : dataset.num_samples();
  so.mixture = std::move(mixture);
  so.batch_size = options.batch_size;
  so.shuffle = options.shuffle;
  so.block_samples = BlockSamples(dataset.schema(), options.block_bytes);
  so.window_blocks = options.shuffle_window;
  so.seed = options.seed;
  so.drop_last = options.drop_last;
  so.tail = options.tail_policy;
  so.rank = options.rank;
  so.world_size = options.world_size;
  return Sampler::Create(so);
}

// The warnings Create prints once about what it will read: no batches at all for this rank,
// or one part of a partitioned pack.
void WarnAboutShare(const Dataset& dataset, const LoaderOptions& options, const Sampler& sampler) {
  if (sampler.batches_per_epoch() == 0 && dataset.num_samples() > 0) {
    const uint64_t share = sampler.own_samples();
    WarnOnce(options.drop_last
                 ? "the loader yields no batches: rank " + std::to_string(options.rank) +
                       "'s share of the " + std::to_string(dataset.num_samples()) +
                       " samples is smaller than batch size " + std::to_string(options.batch_size) +
                       " and drop_last is set"
                 : "the loader yields no batches: with " + std::to_string(options.world_size) +
                       " ranks and this tail policy, rank " + std::to_string(options.rank) +
                       " gets no samples (its own share would be " + std::to_string(share) + ")");
  }
  if (const std::optional<ManifestPart> part = PartOfPartitionedPack(dataset.manifest());
      part && part->count > 1) {
    WarnOnce(dataset.dir() + " is part " + std::to_string(part->index) + " of " +
             std::to_string(part->count) + " of a partitioned pack (kiln pack --part " +
             std::to_string(part->index) + " --of " + std::to_string(part->count) +
             "): it holds only that part's " + std::to_string(dataset.num_samples()) +
             " samples; `kiln merge` joins the parts into the whole dataset");
  }
}

}  // namespace

Result<std::unique_ptr<Loader>> Loader::CreateWithDeviceOps(std::shared_ptr<const Dataset> dataset,
                                                            const LoaderOptions& options,
                                                            std::shared_ptr<DeviceOps> ops) {
  return CreateImpl(std::move(dataset), options, std::move(ops), nullptr);
}

Result<std::unique_ptr<Loader>> Loader::CreateMixture(
    std::vector<std::shared_ptr<const Dataset>> datasets, const MixtureOptions& mixture,
    const LoaderOptions& options) {
  const bool weights = !mixture.weights.empty();
  const std::vector<double>& values = weights ? mixture.weights : mixture.repeats;
  if (weights && !mixture.repeats.empty()) {
    return Status::InvalidArgument("mixture: give weights or repeats, not both");
  }
  if (values.size() != datasets.size()) {
    return Status::InvalidArgument("mixture: " + std::to_string(datasets.size()) +
                                   " datasets but " + std::to_string(values.size()) +
                                   (weights ? " weights" : " repeats") + "; give one per dataset");
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<MixtureDataset> joined, MixtureDataset::Create(datasets));
  std::vector<MixtureSourceSpec> specs(datasets.size());
  for (size_t s = 0; s < datasets.size(); ++s) {
    specs[s].num_samples = datasets[s]->num_samples();
    (weights ? specs[s].weight : specs[s].repeat) = values[s];
    specs[s].name = datasets[s]->dir();
  }
  KILN_ASSIGN_OR_RETURN(MixtureSchedule schedule,
                        MixtureSchedule::Create(specs, mixture.samples_per_epoch));
  return CreateImpl(std::shared_ptr<const Dataset>(std::move(joined)), options, nullptr,
                    std::make_shared<const MixtureSchedule>(std::move(schedule)));
}

Result<std::unique_ptr<Loader>> Loader::OpenMixture(const std::vector<std::string>& dirs,
                                                    const MixtureOptions& mixture,
                                                    const LoaderOptions& options) {
  std::vector<std::shared_ptr<const Dataset>> datasets;
  for (const std::string& dir : dirs) {
    if (Dataset::IsUrl(dir)) EnableRemoteDatasets();
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> dataset, Dataset::Open(dir));
    datasets.emplace_back(std::move(dataset));
  }
  return CreateMixture(std::move(datasets), mixture, options);
}

Result<std::unique_ptr<Loader>> Loader::CreateImpl(std::shared_ptr<const Dataset> dataset,
                                                   const LoaderOptions& options,
                                                   std::shared_ptr<DeviceOps> ops,
                                                   std::shared_ptr<const MixtureSchedule> mixture) {
  if (!dataset) return Status::InvalidArgument("Loader::Create: null dataset");
  StatsExportIdentity identity;  // the loader's start, for the statistics export
  identity.start_steady_ns = NowNs();
  identity.start_unix_ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  KILN_RETURN_IF_ERROR(ValidateLoaderOptions(options));
  KILN_ASSIGN_OR_RETURN(const std::optional<StatsExportSettings> export_settings,
                        ResolveStatsExport(options.stats_dir, options.stats_interval_s));
  KILN_ASSIGN_OR_RETURN(Sampler sampler, MakeSampler(*dataset, options, mixture));
  if (mixture) {
    const auto& joined = static_cast<const MixtureDataset&>(*dataset);
    for (size_t s = 0; s < joined.num_sources(); ++s) {
      if (joined.source(s).jpeg_records()) {
        return Status::NotSupported(joined.source(s).dir() +
                                    ": a mixture of JPEG-record datasets is not supported yet");
      }
    }
  }
  if (dataset->jpeg_records() && !options.augment.resamples()) {
    return Status::InvalidArgument(
        dataset->dir() + ": its records are JPEG images of their own size (up to " +
        std::to_string(dataset->jpeg_max_side()) + "x" + std::to_string(dataset->jpeg_max_side()) +
        " pixels), so batches need an output size: set LoaderOptions::augment.resize_height and "
        "resize_width (RandomResizedCrop) or augment.center_crop_height and center_crop_width "
        "(center crop + resize); in Python kiln.Loader(..., random_resized_crop=(H, W)) or "
        "center_crop=(H, W); kiln bench --random-resized-crop HxW or --center-crop HxW");
  }
  KILN_ASSIGN_OR_RETURN(TensorSchema out_schema,
                        AugmentedSchema(dataset->schema(), options.augment));
  WarnAboutShare(*dataset, options, sampler);
  std::vector<uint64_t> source_fingerprints;
  uint64_t fingerprint = 0;
  if (mixture) {
    // The mixture's fingerprint: its schedule's (sizes, quotas, N) and every source's manifest.
    const auto& joined = static_cast<const MixtureDataset&>(*dataset);
    fingerprint = mixture->Fingerprint();
    for (size_t s = 0; s < joined.num_sources(); ++s) {
      const Dataset& src = joined.source(s);
      KILN_ASSIGN_OR_RETURN(const uint64_t f, ManifestChecksum(src.manifest().ToJson(), src.dir()));
      source_fingerprints.push_back(f);
      fingerprint = SplitMix64Mix(fingerprint ^ f);
    }
  } else {
    KILN_ASSIGN_OR_RETURN(fingerprint,
                          ManifestChecksum(dataset->manifest().ToJson(), dataset->dir()));
  }
  std::unique_ptr<Loader> loader(
      new Loader(std::move(dataset), options, std::move(sampler), out_schema));
  loader->dataset_fingerprint_ = fingerprint;
  loader->mixture_ = std::move(mixture);
  loader->source_fingerprints_ = std::move(source_fingerprints);
  uint64_t start_epoch = options.start_epoch, start_consumed = 0;
  if (options.resume) {
    KILN_ASSIGN_OR_RETURN(start_consumed, loader->CheckResume(*options.resume));
    start_epoch = options.resume->epoch;
  }
  KILN_ASSIGN_OR_RETURN(const SlotLayout layout, loader->AllocateSlots());
  KILN_RETURN_IF_ERROR(loader->SetUpDevice(std::move(ops), layout));
  const uint32_t threads = options.num_threads != 0
                               ? options.num_threads
                               : std::max(1u, std::thread::hardware_concurrency());
  KILN_RETURN_IF_ERROR(loader->SetUpIo(threads, layout));
  {
    std::unique_lock<std::mutex> lock(loader->mu_);
    loader->StartEpochLocked(start_epoch, lock, start_consumed);
  }
  // On an error the destructor (on return) stops and joins the threads already started.
  KILN_RETURN_IF_ERROR(loader->StartThreads(threads));
  if (export_settings) {
    identity.rank = options.rank;
    identity.world_size = options.world_size;
    identity.threads = loader->num_threads();
    Loader* raw = loader.get();
    KILN_ASSIGN_OR_RETURN(loader->exporter_, StatsExporter::Start(*export_settings, identity,
                                                                  [raw] { return raw->stats(); }));
  }
  return loader;
}

Result<Loader::SlotLayout> Loader::AllocateSlots() {
  // A slot holds the largest batch this rank can get: never more than its share of samples.
  SlotLayout layout;
  layout.samples =
      std::max<uint64_t>(1, std::min<uint64_t>(options_.batch_size, sampler_.samples_per_epoch()));
  layout.data_bytes = AlignUp(layout.samples * out_schema_.sample_bytes(), kSlotAlign);
  layout.label_bytes = AlignUp(layout.samples * sizeof(int64_t), kSlotAlign);
  layout.count = options_.prefetch + 1;
  const uint64_t slot_bytes = layout.slot_bytes();
  const size_t slot_count = layout.count;
  Result<std::unique_ptr<HostBuffer>> buffer =
      HostBuffer::Allocate(slot_bytes * slot_count, options_.pin_memory,
                           options_.device >= 0 ? options_.device : options_.pin_device);
  if (!buffer.ok()) {
    return Status::OutOfRange(
        "Loader over " + dataset_->dir() + ": " + buffer.status().message() + " (" +
        std::to_string(slot_count) + " slots = prefetch + 1, of " + std::to_string(slot_bytes) +
        " bytes each); lower prefetch or batch_size (kiln bench: --prefetch, --batch-size)");
  }
  buffer_ = std::move(buffer).value();
  if (options_.pin_memory && !buffer_->pinned()) {
    WarnOnce("pinned memory unavailable (" + buffer_->fallback_reason() +
             "); batch slots use page-aligned host memory");
  }
  try {
    slots_.resize(slot_count);
    for (size_t s = 0; s < slot_count; ++s) {
      Slot& slot = slots_[s];
      slot.data = buffer_->data() + s * slot_bytes;
      slot.labels = reinterpret_cast<int64_t*>(slot.data + layout.data_bytes);
      slot.indices.resize(layout.samples);
      slot.is_padding.resize(layout.samples);
      if (mixture_) {
        slot.sources.resize(layout.samples);
        slot.source_indices.resize(layout.samples);
      }
    }
  } catch (const std::bad_alloc&) {
    return Status::OutOfRange(
        "Loader over " + dataset_->dir() + ": cannot allocate the sample lists of " +
        std::to_string(slot_count) + " batch slots of " + std::to_string(layout.samples) +
        " samples; lower prefetch or batch_size");
  }
  return layout;
}

Status Loader::SetUpDevice(std::shared_ptr<DeviceOps> ops, const SlotLayout& layout) {
  if (options_.device < 0) return Status::Ok();
  std::string reason;
  if (ops != nullptr) {
    KILN_ASSIGN_OR_RETURN(device_, DeviceRing::Create(std::move(ops), options_.device, layout.count,
                                                      layout.data_bytes, layout.label_bytes));
  } else if (CudaDeviceAvailable(&reason)) {
    KILN_RETURN_IF_ERROR(CudaCheckDevice(options_.device));
    KILN_ASSIGN_OR_RETURN(device_,
                          DeviceRing::Create(CudaDeviceOps(), options_.device, layout.count,
                                             layout.data_bytes, layout.label_bytes));
    if (!buffer_->pinned()) {
      WarnOnce(
          "device batches from unpinned (pageable) slots: each upload's cudaMemcpyAsync "
          "blocks the consumer thread until the copy is done (pin_memory is off or "
          "cudaHostAlloc failed)");
    }
  } else {
    WarnOnce("device " + std::to_string(options_.device) + " requested but " + reason +
             "; the loader serves host batches");
  }
  return Status::Ok();
}

Status Loader::SetUpIo(uint32_t threads, const SlotLayout& layout) {
  // Split each batch into one chunk per thread so that even prefetch 1 keeps every thread busy.
  chunks_per_batch_ = std::min(threads, options_.batch_size);
  chunk_samples_ = (options_.batch_size + chunks_per_batch_ - 1) / chunks_per_batch_;
  schedule_.Configure(slots_.size(), chunks_per_batch_);
  KILN_RETURN_IF_ERROR(ChooseIoPath(threads));
  if (options_.shuffle == ShuffleMode::kBlock && range_readers_.empty()) {
    BlockMemoryFit fit;
    fit.block_bytes = sampler_.block_samples() * dataset_->schema().sample_bytes();
    fit.window_blocks = options_.shuffle_window;
    fit.read_ahead_bytes = options_.read_ahead_bytes;
    fit.slot_bytes = layout.slot_bytes() * layout.count;
    fit.memory_limit_bytes = MemoryLimitBytes();
    block_memory_fit_ = fit;
    if (!fit.fits()) WarnOnce(BlockMemoryFitWarning(fit));
  }
  // The direct path reads ahead with its queues; madvise read-ahead is for the mappings.
  if (options_.read_ahead_bytes > 0 && range_readers_.empty()) {
    read_ahead_samples_window_ = std::max<uint64_t>(
        1, options_.read_ahead_bytes / std::max<uint64_t>(1, dataset_->schema().sample_bytes()));
  }
  return Status::Ok();
}

Status Loader::StartThreads(uint32_t threads) {
  for (uint32_t t = 0; t < threads; ++t) {
    RangeReader* reader = range_readers_.empty() ? nullptr : range_readers_[t].get();
    try {
      threads_.emplace_back([this, reader] { WorkerLoop(reader); });
    } catch (const std::system_error& e) {
      return Status::IOError(
          "Loader over " + dataset_->dir() + ": cannot start fetch thread " +
          std::to_string(t + 1) + " of " + std::to_string(threads) + " (" + e.what() +
          "): the process or user thread limit (RLIMIT_NPROC, `ulimit -u`, a container's pids "
          "limit) or the address-space limit (RLIMIT_AS) is reached; lower num_threads (kiln "
          "bench: --threads; " +
          std::to_string(t) + " started)");
    }
  }
  return Status::Ok();
}

Loader::Loader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
               Sampler sampler, TensorSchema out_schema)
    : dataset_(std::move(dataset)),
      options_(options),
      sampler_(std::move(sampler)),
      out_schema_(out_schema),
      owner_pid_(::getpid()) {}

bool Loader::Forked() const { return ::getpid() != owner_pid_; }

Status Loader::CheckProcess() const {
  const pid_t pid = ::getpid();
  if (pid == owner_pid_) return Status::Ok();
  return Status::NotSupported(
      "kiln Loader over " + dataset_->dir() + " was created in process " +
      std::to_string(owner_pid_) + " and is used in process " + std::to_string(pid) +
      ", a child forked after the loader started its fetch threads: the child has none of them "
      "and its batch slots hold the parent's batches. Create the Loader in the process that "
      "reads from it (in a PyTorch DataLoader worker: in worker_init_fn or on first use in the "
      "worker), start workers with the 'spawn' or 'forkserver' method, or read in the parent "
      "with num_workers=0 (the loader's own threads already read in parallel)");
}

Loader::~Loader() {
  if (Forked()) {
    // A forked child's copy: its threads do not exist here, its mutex may be locked and its
    // condition variables may count waiters that will never wake (pthread_cond_destroy would
    // wait for them), and pinned or device memory belongs to the parent's CUDA context. Leave
    // all of that to the process's end; what remains is ordinary memory and the dataset.
    (void)new std::vector<std::thread>(std::move(threads_));  // never joined nor destroyed
    (void)sync_.release();
    (void)device_.release();
    (void)exporter_.release();  // the parent's: its thread is not here; the child writes nothing
    if (buffer_ != nullptr && buffer_->pinned()) (void)buffer_.release();
    // The direct queues' reads in flight were issued by the parent's threads: waiting for them
    // here could wait forever.
    for (std::unique_ptr<RangeReader>& reader : range_readers_) reader->Abandon();
    // The local cache's fill thread is the parent's too.
    if (disk_cache_ != nullptr)
      (void)new std::shared_ptr<remote::DiskCache>(std::move(disk_cache_));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  // A fetch thread waiting on a remote server that hangs would hold the join for its request
  // timeout (and retries): its reader abandons the reads instead.
  for (std::unique_ptr<RangeReader>& reader : range_readers_) reader->Interrupt();
  for (std::thread& t : threads_) t.join();
  // The final export line: every counter is final now (no fetch thread left), the device's too.
  if (exporter_ != nullptr) exporter_->Finish();
  if (device_ != nullptr) {
    // The fetch threads are gone: no lock is needed. The ring's destructor waits for the
    // uploads and the consumer's work before it frees device memory.
    Result<std::unique_ptr<DeviceOps::Scope>> scope = EnterDevice();
    if (holding_) device_->Release((next_batch_ - 1) % slots_.size());
    holding_ = false;
    device_.reset();
  }
}

Result<uint64_t> Loader::CheckResume(const ReaderState& state) const {
  const std::string what = "cannot resume from the saved reader state (" + state.ToString() + "): ";
  KILN_RETURN_IF_ERROR(CheckResumeOrder(state, what));
  KILN_RETURN_IF_ERROR(CheckResumeAugment(state, what));
  if (options_.shuffle == ShuffleMode::kBlock) return ResumeBlockPosition(state, what);
  const uint64_t n = sampler_.options().num_samples;  // a mixture's samples_per_epoch
  if (state.samples_consumed > n) {
    return Status::OutOfRange(what + "its position is past the end of the epoch (" +
                              std::to_string(n) + " samples)");
  }
  return state.samples_consumed;
}

Status Loader::CheckResumeOrder(const ReaderState& state, const std::string& what) const {
  if (state.order_version != kSamplerOrderVersion) {
    return Status::NotSupported(what + "it refers to sampler order version " +
                                std::to_string(state.order_version) +
                                "; this kiln computes "
                                "version " +
                                std::to_string(kSamplerOrderVersion) +
                                " and cannot reproduce that order (restart the epoch instead)");
  }
  KILN_RETURN_IF_ERROR(CheckResumeMixture(state, what));
  if (state.dataset_fingerprint != dataset_fingerprint_ ||
      state.num_samples != sampler_.options().num_samples) {
    return Status::InvalidArgument(
        what + "it was saved on another dataset (fingerprint " +
        HexDigest(state.dataset_fingerprint) + ", " + std::to_string(state.num_samples) +
        " samples); " + dataset_->dir() + " has fingerprint " + HexDigest(dataset_fingerprint_) +
        " and " + std::to_string(sampler_.options().num_samples) + " samples");
  }
  if (options_.start_epoch != 0 && options_.start_epoch != state.epoch) {
    return Status::InvalidArgument(what + "start_epoch " + std::to_string(options_.start_epoch) +
                                   " contradicts the state's epoch " + std::to_string(state.epoch) +
                                   " (leave start_epoch 0)");
  }
  if (state.seed != options_.seed) {
    return Status::InvalidArgument(what + "it was saved with seed " + std::to_string(state.seed) +
                                   "; the loader options have seed " +
                                   std::to_string(options_.seed));
  }
  if (state.shuffle != options_.shuffle) {
    return Status::InvalidArgument(what + "it was saved with shuffle " +
                                   ShuffleModeName(state.shuffle) +
                                   "; the loader options have "
                                   "shuffle " +
                                   ShuffleModeName(options_.shuffle));
  }
  const bool block = options_.shuffle == ShuffleMode::kBlock;
  // The block size as asked (block_bytes / sample_bytes): the sampler's cap for small datasets
  // (kMinBlocksPerRank) depends on the world size, which may change at an epoch boundary.
  const uint64_t asked_block = sampler_.options().block_samples;
  if (block &&
      (state.block_samples != asked_block || state.window_blocks != options_.shuffle_window)) {
    return Status::InvalidArgument(
        what + "it was saved with blocks of " + std::to_string(state.block_samples) +
        " samples and a window of " + std::to_string(state.window_blocks) +
        " blocks; the loader options give " + std::to_string(asked_block) +
        " samples per block and a window of " + std::to_string(options_.shuffle_window));
  }
  return Status::Ok();
}

namespace {

// The augmentation fields of a reader state for `a` (reader/reader_state.h).
void FillAugmentState(const AugmentOptions& a, ReaderState* s) {
  // The center crop is recorded as a resized crop (output size, a digest of its ratio) whose
  // digest no RandomResizedCrop range shares (reader/reader_state.md).
  s->resized_crop = a.resamples();
  s->crop_height = a.center_crop()    ? a.center_crop_height
                   : a.resized_crop() ? a.resize_height
                                      : a.crop_height;
  s->crop_width = a.center_crop()    ? a.center_crop_width
                  : a.resized_crop() ? a.resize_width
                                     : a.crop_width;
  s->resized_crop_digest = a.center_crop()    ? CenterCropDigest(a)
                           : a.resized_crop() ? ResizedCropDigest(a)
                                              : 0;
  s->flip = a.flip;
}

}  // namespace

Status Loader::CheckResumeMixture(const ReaderState& state, const std::string& what) const {
  const size_t have = mixture_ ? mixture_->num_sources() : 0;
  const size_t saved = state.mixture_sources.size();
  if (have == 0 && saved == 0) return Status::Ok();
  if (have == 0 || saved == 0) {
    const auto describe = [](size_t n) {
      return n == 0 ? std::string("one dataset")
                    : "a mixture of " + std::to_string(n) + " datasets";
    };
    return Status::InvalidArgument(what + "it was saved by a loader over " + describe(saved) +
                                   "; this loader reads " + describe(have));
  }
  if (state.mixture_version != kMixtureOrderVersion) {
    return Status::NotSupported(what + "it refers to mixture order version " +
                                std::to_string(state.mixture_version) + "; this kiln computes " +
                                std::to_string(kMixtureOrderVersion));
  }
  if (saved != have) {
    return Status::InvalidArgument(what + "it was saved on a mixture of " + std::to_string(saved) +
                                   " datasets; this loader mixes " + std::to_string(have));
  }
  const auto& joined = static_cast<const MixtureDataset&>(*dataset_);
  for (size_t k = 0; k < have; ++k) {
    const MixtureSourceState& src = state.mixture_sources[k];
    const std::string name =
        "mixture source " + std::to_string(k) + " (" + joined.source(k).dir() + ")";
    if (src.fingerprint != source_fingerprints_[k] ||
        src.num_samples != mixture_->source_samples(k)) {
      return Status::InvalidArgument(
          what + name + " is another dataset: the state has fingerprint " +
          HexDigest(src.fingerprint) + " and " + std::to_string(src.num_samples) +
          " samples, the dataset " + HexDigest(source_fingerprints_[k]) + " and " +
          std::to_string(mixture_->source_samples(k)));
    }
    if (src.quota != mixture_->quota(k)) {
      return Status::InvalidArgument(
          what + name + " draws " + std::to_string(src.quota) +
          " samples per epoch in the state but " + std::to_string(mixture_->quota(k)) +
          " with these weights and samples_per_epoch (" +
          std::to_string(mixture_->samples_per_epoch()) + "; the state's " +
          std::to_string(state.num_samples) + "): another mixture");
    }
  }
  if (state.num_samples != mixture_->samples_per_epoch()) {
    return Status::InvalidArgument(what + "it was saved with samples_per_epoch " +
                                   std::to_string(state.num_samples) + "; this mixture has " +
                                   std::to_string(mixture_->samples_per_epoch()));
  }
  return Status::Ok();
}

Status Loader::CheckResumeAugment(const ReaderState& state, const std::string& what) const {
  ReaderState now;
  FillAugmentState(options_.augment, &now);
  if (state.crop_height != now.crop_height || state.crop_width != now.crop_width ||
      state.flip != now.flip || state.resized_crop != now.resized_crop ||
      state.resized_crop_digest != now.resized_crop_digest) {
    auto describe = [](const ReaderState& s) {
      return std::string(s.resized_crop ? "resized crop " : "crop ") +
             std::to_string(s.crop_height) + "x" + std::to_string(s.crop_width) +
             (s.resized_crop ? " (scale/ratio digest " + std::to_string(s.resized_crop_digest) + ")"
                             : "") +
             " flip " + (s.flip ? "on" : "off");
    };
    return Status::InvalidArgument(what + "it was saved with " + describe(state) +
                                   "; the loader options have " + describe(now));
  }
  return Status::Ok();
}

Result<uint64_t> Loader::ResumeBlockPosition(const ReaderState& state,
                                             const std::string& what) const {
  // kBlock: the position counts steps of the saved configuration.
  SamplerOptions saved = sampler_.options();
  saved.batch_size = state.batch_size;
  saved.world_size = state.world_size;
  saved.rank = 0;
  saved.tail = state.tail;
  saved.drop_last = state.drop_last;
  KILN_ASSIGN_OR_RETURN(Sampler saved_sampler, Sampler::Create(saved));
  const uint64_t saved_step = uint64_t{state.batch_size} * state.world_size;
  const uint64_t saved_end = saved_sampler.batches_per_epoch() * saved_step;
  if (state.samples_consumed > saved_end) {
    return Status::OutOfRange(what + "its position is past the end of the epoch (" +
                              std::to_string(saved_sampler.batches_per_epoch()) + " steps of " +
                              std::to_string(saved_step) + ")");
  }
  const uint64_t step = uint64_t{options_.batch_size} * options_.world_size;
  if (state.samples_consumed == 0) return uint64_t{0};
  if (state.samples_consumed == saved_end) return sampler_.batches_per_epoch() * step;
  if (state.batch_size != options_.batch_size || state.world_size != options_.world_size) {
    return Status::InvalidArgument(
        what +
        "block shuffle deals blocks to ranks by world size: a mid-epoch state saved "
        "with world size " +
        std::to_string(state.world_size) + " and batch size " + std::to_string(state.batch_size) +
        " restores only with the same (the loader has " + std::to_string(options_.world_size) +
        " and " + std::to_string(options_.batch_size) +
        "); restore at an epoch boundary to change them");
  }
  if (state.samples_consumed % step != 0) {
    return Status::InvalidArgument(what + "the position is not a whole number of steps");
  }
  if (state.samples_consumed / step > sampler_.batches_per_epoch()) {
    return Status::OutOfRange(what + "its position is past the end of the epoch (" +
                              std::to_string(sampler_.batches_per_epoch()) + " steps)");
  }
  return state.samples_consumed;
}

ReaderState Loader::state() const {
  ReaderState s;
  s.order_version = kSamplerOrderVersion;
  {
    // A forked child has no fetch threads: read the copy without its (possibly locked) mutex.
    std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
    if (!Forked()) lock.lock();
    if (epoch_started_) {
      s.epoch = epoch_;
      s.samples_consumed = sampler_.ConsumedAfter(next_batch_);
    } else {
      s.epoch = epoch_ + 1;  // Next() returned false: the next call starts epoch_ + 1
      s.samples_consumed = 0;
    }
  }
  s.seed = options_.seed;
  s.shuffle = options_.shuffle;
  if (options_.shuffle == ShuffleMode::kBlock) {
    s.block_samples = sampler_.options().block_samples;
    s.window_blocks = options_.shuffle_window;
  }
  s.batch_size = options_.batch_size;
  s.world_size = options_.world_size;
  s.tail = options_.tail_policy;
  s.drop_last = options_.drop_last;
  FillAugmentState(options_.augment, &s);
  s.num_samples = sampler_.options().num_samples;
  s.dataset_fingerprint = dataset_fingerprint_;
  if (mixture_) {
    s.mixture_version = kMixtureOrderVersion;
    for (size_t k = 0; k < mixture_->num_sources(); ++k) {
      s.mixture_sources.push_back(
          {source_fingerprints_[k], mixture_->source_samples(k), mixture_->quota(k)});
    }
  }
  return s;
}

uint64_t Loader::batches_in_epoch() const {
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  if (!Forked()) lock.lock();  // as in state()
  return sampler_.batches_in_epoch();
}

void Loader::StartEpochLocked(uint64_t epoch, std::unique_lock<std::mutex>& lock,
                              uint64_t consumed) {
  // The caller released the held batch and drained the device uploads (ReleaseHeld,
  // DeviceRing::Drain) before taking the lock: every slot is free to be refilled.
  // No new claims, then wait for chunks in flight: they write slots and read the permutation.
  schedule_.Stop();
  idle_cv_.wait(lock, [this] { return busy_ == 0; });
  // `consumed` was checked by CheckResume (0 is always valid).
  if (!sampler_.SetEpoch(epoch, consumed).ok()) (void)sampler_.SetEpoch(epoch, 0);
  for (Slot& slot : slots_) {
    slot.batch = UINT64_MAX;
    slot.pending = 0;
  }
  epoch_ = epoch;
  epoch_started_ = true;
  schedule_.Start(sampler_.batches_in_epoch());
  next_batch_ = 0;
  holding_ = false;
  const uint64_t batches = sampler_.batches_in_epoch();
  epoch_positions_ =
      batches == 0 ? 0 : (batches - 1) * options_.batch_size + sampler_.BatchSize(batches - 1);
  read_ahead_until_ = 0;
  work_cv_.notify_all();
}

void Loader::SetEpoch(uint64_t epoch) {
  if (Forked()) return;  // Next() reports it (CheckProcess)
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (epoch_started_ && epoch_ == epoch && next_batch_ == 0) return;
  }
  Result<std::unique_ptr<DeviceOps::Scope>> scope = EnterDevice();
  if (!scope.ok() && device_ != nullptr) device_->KeepError(scope.status());
  // The abandoned batch the consumer holds, and uploads issued ahead: their host slots are
  // about to be refilled. Waited for without the mutex.
  ReleaseHeld();
  if (device_ != nullptr) device_->Drain();
  std::unique_lock<std::mutex> lock(mu_);
  StartEpochLocked(epoch, lock);
}

uint64_t Loader::BeginEpoch() {
  std::unique_lock<std::mutex> lock(mu_);
  if (epoch_started_ && next_batch_ == 0) return epoch_;
  StartEpochLocked(epoch_ + 1, lock);
  return epoch_;
}

bool Loader::at_epoch_start() const {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_started_ && next_batch_ == 0;
}

uint64_t Loader::epoch() const {
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  if (!Forked()) lock.lock();  // as in state()
  return epoch_;
}

LoaderStats Loader::stats() const {
  LoaderStats st;
  {
    std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
    if (!Forked()) lock.lock();  // as in state()
    st = stats_;
    st.epoch = epoch_;
  }
  st.io_path = io_path();
  if (disk_cache_ != nullptr && !Forked()) {
    const remote::DiskCache::Stats c = disk_cache_->stats();
    st.remote_cache_pieces_held = c.pieces_held;
    st.remote_cache_pieces_total = c.pieces_total;
    st.remote_cache_fill_done = c.fill_done;
    st.remote_cache_fill_error = c.fill_error;
    st.requests.Add(disk_cache_->fill_requests());
  }
#if KILN_HAVE_REMOTE
  if (!Forked()) {  // as the disk cache: the parent's threads may hold the stores' mutexes
    for (const StoreReads& r : store_reads_) {
      st.requests.Add(r.store->read_range_stats().Since(r.start));
    }
  }
#endif
  if (device_ != nullptr) {
    st.uploads = device_->uploads();
    st.upload_bytes = device_->upload_bytes();
    st.upload_wait_ns = device_->upload_wait_ns();
  }
  return st;
}

Result<bool> Loader::Next(Batch* batch) { return Next(batch, nullptr); }

Result<bool> Loader::Next(Batch* batch, const std::function<bool()>& interrupted,
                          uint32_t poll_ms) {
  KILN_RETURN_IF_ERROR(CheckProcess());  // before mu_, which a forked copy may hold locked
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<DeviceOps::Scope> scope, EnterDevice());
  ReleaseHeld();  // the device release (an event wait) runs without the mutex
  std::unique_lock<std::mutex> lock(mu_);
  if (device_ != nullptr) KILN_RETURN_IF_ERROR(device_->TakeError());
  if (!epoch_started_) {
    lock.unlock();
    if (device_ != nullptr) device_->Drain();  // nothing is in flight at an epoch's end
    lock.lock();
    StartEpochLocked(epoch_ + 1, lock);
  }
  if (next_batch_ >= sampler_.batches_in_epoch()) {
    epoch_started_ = false;  // The next call starts epoch_ + 1.
    return false;
  }
  const uint64_t b = next_batch_;
  Slot& slot = slots_[b % slots_.size()];
  const uint64_t wait_start = NowNs();
  const auto ready = [&] { return slot.batch == b && slot.pending == 0; };
  if (!interrupted) {
    ready_cv_.wait(lock, ready);
  } else {
    const auto poll = std::chrono::milliseconds(std::max<uint32_t>(1, poll_ms));
    while (!ready_cv_.wait_for(lock, poll, ready)) {
      // The callback may run Python code: never under mu_, which the fetch threads need.
      lock.unlock();
      const bool stop = interrupted();
      lock.lock();
      if (stop && !ready()) {
        stats_.consumer_wait_ns += NowNs() - wait_start;
        return Status::Cancelled("interrupted while waiting for batch " + std::to_string(b) +
                                 " of epoch " + std::to_string(epoch_));
      }
    }
  }
  stats_.consumer_wait_ns += NowNs() - wait_start;
  ++next_batch_;
  holding_ = true;
  batch->epoch = epoch_;
  batch->index = sampler_.first_step() + b;
  batch->size = slot.size;
  batch->schema = out_schema_;
  batch->data = slot.data;
  batch->labels = slot.labels;
  batch->sample_indices = slot.indices.data();
  batch->is_padding = slot.is_padding.data();
  batch->sources = nullptr;
  if (mixture_) {
    // Concatenated indices (what the fetch threads read) to (source, index within it): done by
    // the mapped path's fetch threads as they read (FillChunk), here for the direct path.
    for (uint32_t k = 0; !range_readers_.empty() && k < slot.size; ++k) {
      const uint32_t src = mixture_->SourceOfIndex(slot.indices[k]);
      slot.sources[k] = src;
      slot.source_indices[k] = slot.indices[k] - mixture_->offset(src);
    }
    batch->sample_indices = slot.source_indices.data();
    batch->sources = slot.sources.data();
  }
  batch->pinned = buffer_->pinned();
  batch->device_data = nullptr;
  batch->device_labels = nullptr;
  batch->ready_event = nullptr;
  batch->device = -1;
  batch->device_slot_ = nullptr;
  batch->device_generation_ = 0;
  if (!slot.status.ok()) return slot.status;
  ++stats_.batches;
  stats_.samples += slot.size;
  stats_.bytes += batch->bytes();
  if (device_ == nullptr) return true;
  // Uploads are issued as soon as the consumer thread sees a batch filled: this one if its
  // copy was not issued yet, then every filled batch after it (in order, up to the ring's
  // size), so a copy overlaps the step that runs on the batch before it even when the host
  // waits for every step. Each copy waits on the GPU for its device buffer's release.
  struct Ahead {
    size_t slot;
    uint64_t batch;
    uint32_t size;
  };
  Ahead ahead[64];
  size_t n_ahead = 0;
  const uint64_t end = std::min<uint64_t>(b + slots_.size(), sampler_.batches_in_epoch());
  for (uint64_t n = b + 1; n < end && n_ahead < 64; ++n) {
    const Slot& next = slots_[n % slots_.size()];
    if (next.batch != n || next.pending != 0 || !next.status.ok()) break;
    ahead[n_ahead++] = Ahead{n % slots_.size(), n, next.size};
  }
  const uint32_t size = slot.size;
  lock.unlock();
  const size_t s = b % slots_.size();
  if (!device_->uploaded(s, b)) KILN_RETURN_IF_ERROR(UploadSlot(s, b, size));
  device_->Describe(s, batch);
  for (size_t i = 0; i < n_ahead; ++i) {
    if (device_->uploaded(ahead[i].slot, ahead[i].batch)) continue;
    // A failure here is not this batch's: Next() of that batch issues the upload again.
    if (!UploadSlot(ahead[i].slot, ahead[i].batch, ahead[i].size).ok()) break;
  }
  return true;
}

bool Loader::TaskClaimableLocked() const { return schedule_.claimable(); }

void Loader::ClaimTaskLocked(uint64_t* batch, uint32_t* chunk) {
  schedule_.Claim(batch, chunk);
  Slot& slot = slots_[*batch % slots_.size()];
  if (*chunk == 0) {  // Tasks are claimed in order: chunk 0 prepares the slot.
    slot.batch = *batch;
    slot.pending = chunks_per_batch_;
    slot.size = sampler_.BatchSize(*batch);
    slot.status = Status::Ok();
  }
}

void Loader::FinishTaskLocked(Slot& slot, Status status) {
  ++stats_.chunks;
  --busy_;
  if (!status.ok() && slot.status.ok()) slot.status = std::move(status);
  if (--slot.pending == 0) ready_cv_.notify_all();
  if (busy_ == 0) idle_cv_.notify_all();
}

std::unique_ptr<JpegSampleDecoder> Loader::MakeJpegDecoder() const {
  if (!dataset_->jpeg_records()) return nullptr;
  return std::make_unique<JpegSampleDecoder>(dataset_->schema().channels, options_.augment,
                                             out_schema_.height, out_schema_.width, options_.seed,
                                             dataset_->jpeg_max_side());
}

void Loader::AugmentIntoSlot(Slot& slot, uint32_t k, const uint8_t* decoded,
                             uint64_t* augment_ns) const {
  const TensorSchema& stored = dataset_->schema();
  const AugmentParams params =
      DrawAugmentParams(stored, options_.augment, options_.seed, sampler_.epoch(), slot.indices[k]);
  // Timing every 8th sample keeps clock reads off most samples; the sum is scaled by 8.
  const bool timed = (k & 7) == 0;
  const uint64_t augment_start = timed ? NowNs() : 0;
  ApplyAugment(decoded, stored, params, out_schema_, slot.data + k * out_schema_.sample_bytes());
  if (timed) *augment_ns += (NowNs() - augment_start) * 8;
}

}  // namespace kiln
