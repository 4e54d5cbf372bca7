#include "tools/bench/bench_runner.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>
#include <vector>

#include "reader/cuda_handles.h"
#include "reader/host_buffer.h"
#include "reader/normalize_kernel.h"
#include "reader/sampler.h"
#include "tools/bench/bottleneck.h"

namespace kiln {

namespace {
// Timed parts shorter than this give no meaningful rate (BenchReport::short_run_note).
constexpr double kShortestTimedSeconds = 0.01;
double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

struct Usage {
  double cpu_seconds = 0;
  uint64_t major_faults = 0;
  double peak_rss_mb = 0;
};

Usage GetUsage() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  Usage u;
  u.cpu_seconds = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
                  ru.ru_stime.tv_usec / 1e6;
  u.major_faults = static_cast<uint64_t>(ru.ru_majflt);
  u.peak_rss_mb = ru.ru_maxrss * 1024.0 / 1e6;  // ru_maxrss is in KiB on Linux
  return u;
}

// A field of /proc/self/status ("RssAnon", "RssFile") in 10^6 bytes; 0 where unavailable.
double ProcStatusMb(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  double kib = 0;
  const size_t len = std::strlen(field);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, field, len) == 0 && line[len] == ':') {
      kib = std::atof(line + len + 1);
      break;
    }
  }
  std::fclose(f);
  return kib * 1024.0 / 1e6;
}

std::vector<std::string> RegularFiles(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) files.push_back(it->path().string());
  }
  return files;
}

}  // namespace

Status DropPageCache(const std::string& dir) {
  for (const std::string& path : RegularFiles(dir)) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::IOError(path + ": cannot open to drop its cached pages");
    ::fsync(fd);  // dirty pages cannot be dropped; a freshly packed dataset may have some
    const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    if (rc != 0) return Status::IOError(path + ": posix_fadvise(DONTNEED) failed");
  }
  return Status::Ok();
}

namespace {

// Adds the pages of the regular files under `dir` to *total and those resident to *resident.
void CountResidentPages(const std::string& dir, uint64_t* total_pages, uint64_t* resident_pages) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t& total = *total_pages;
  uint64_t& resident = *resident_pages;
  std::vector<unsigned char> vec;
  for (const std::string& path : RegularFiles(dir)) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    const off_t size = ::lseek(fd, 0, SEEK_END);
    if (size > 0) {
      void* map = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
      if (map != MAP_FAILED) {
        const uint64_t pages = (static_cast<uint64_t>(size) + page - 1) / page;
        vec.assign(pages, 0);
        if (::mincore(map, static_cast<size_t>(size), vec.data()) == 0) {
          total += pages;
          for (unsigned char v : vec) resident += v & 1;
        }
        ::munmap(map, static_cast<size_t>(size));
      }
    }
    ::close(fd);
  }
}

// The share of the pages of every dir's files resident in the page cache.
double ResidentFractionOf(const std::vector<std::string>& dirs) {
  uint64_t total = 0, resident = 0;
  for (const std::string& dir : dirs) CountResidentPages(dir, &total, &resident);
  return total ? static_cast<double>(resident) / total : 0.0;
}

}  // namespace

double ResidentFraction(const std::string& dir) { return ResidentFractionOf({dir}); }

void Diagnose(BenchReport* r) {
  StageTimes t;
  t.source = StageSource::kBench;
  t.seconds = r->seconds;
  t.consumer_wait_seconds = r->consumer_wait_seconds;
  t.first_batch_wait_seconds = r->first_batch_wait_seconds;
  t.consumer_seconds = r->consumer_seconds;
  t.consumer_ms = r->consumer_ms;
  t.slot_wait_seconds = r->slot_wait_seconds;
  t.fetch_seconds = r->fetch_seconds;
  t.fetch_cpu_seconds = r->fetch_cpu_seconds;
  t.storage_wait_seconds = r->storage_wait_seconds;
  t.decompress_seconds = r->decompress_seconds;
  t.augment_seconds = r->augment_seconds;
  t.copy_seconds = r->copy_seconds;
  t.jpeg_records = r->jpeg_records;
  t.upload_seconds = r->upload_seconds;
  t.read_ahead_seconds = r->read_ahead_seconds;
  t.batches = r->batches;
  t.bytes = r->bytes;
  t.zstd_records = r->zstd_records;
  t.threads = r->threads;
  t.mb_per_s = r->mb_per_s;
  t.disk_mb_per_s = r->disk_mb_per_s;
  t.io = r->io;
  t.shuffle = r->shuffle;
  t.read_ahead_window_bytes = r->read_ahead_window_bytes;
  t.memory_fit_warning = r->memory_fit_warning;
  t.cache = r->cache;
  t.resident_fraction = r->resident_fraction;
  t.major_faults = r->major_faults;
  t.cpu_seconds = r->cpu_seconds;
  t.direct_reads = r->direct_reads;
  t.direct_max_in_flight = r->direct_max_in_flight;
  t.remote_requests = r->remote_requests;
  t.remote_retries = r->remote_retries;
  t.remote_p50_ms = r->remote_p50_ms;
  t.remote_p99_ms = r->remote_p99_ms;
  Bottleneck b = DiagnoseStages(t);
  r->bottleneck = std::move(b.name);
  r->verdict = std::move(b.verdict);
}

// --device: the pinned upload rate (one full batch, 10 copies), the share of the loader's copy
// time hidden behind the consumer, and the fused kernel on one batch (fp16, ImageNet constants).
Status MeasureDevice(Loader& loader, const BenchOptions& options, BenchReport* r) {
  const LoaderStats stats = loader.stats();
  r->uploads = stats.uploads;
  r->upload_seconds = stats.upload_wait_ns / 1e9;
  const uint64_t batch_bytes =
      uint64_t{options.loader.batch_size} * loader.sample_schema().sample_bytes();
  KILN_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(r->device));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<HostBuffer> host,
                        HostBuffer::Allocate(batch_bytes, true, r->device));
  KILN_ASSIGN_OR_RETURN(DeviceBuffer dev, DeviceBuffer::Allocate(batch_bytes));
  KILN_RETURN_IF_ERROR(CudaCopyToDeviceAsync(dev.data(), host->data(), batch_bytes, stream.get()));
  KILN_RETURN_IF_ERROR(stream.Synchronize());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) {
    KILN_RETURN_IF_ERROR(
        CudaCopyToDeviceAsync(dev.data(), host->data(), batch_bytes, stream.get()));
  }
  KILN_RETURN_IF_ERROR(stream.Synchronize());
  const double copy_s = SecondsSince(t0) / 10;
  r->upload_gbps = copy_s > 0 ? batch_bytes / copy_s / 1e9 : 0;
  r->upload_copy_ms = copy_s * 1e3;
  // Uploads are mostly full batches; the exposed share is the host's wait for copies.
  const double total_copy = static_cast<double>(stats.upload_bytes) / batch_bytes * copy_s;
  r->upload_hidden_share =
      total_copy > 0 ? std::clamp(1.0 - r->upload_seconds / total_copy, 0.0, 1.0) : 0;
  // The kernel, on a held batch of a fresh epoch.
  NormalizeOptions no = ImageNetNormalize();
  no.out_dtype = DType::kFloat16;
  Result<std::unique_ptr<NormalizeKernel>> kernel = NormalizeKernel::Create(
      loader.sample_schema(), AugmentOptions{}, no, options.loader.batch_size, 0);
  if (!kernel.ok()) {
    r->kernel_note = kernel.status().message();
    return Status::Ok();
  }
  loader.SetEpoch(options.loader.start_epoch + options.epochs);
  Batch batch;
  KILN_ASSIGN_OR_RETURN(bool more, loader.Next(&batch));
  if (!more) {
    r->kernel_note = "no batch to run it on";
    return Status::Ok();
  }
  KILN_ASSIGN_OR_RETURN(DeviceBuffer out,
                        DeviceBuffer::Allocate((*kernel)->output_bytes(batch.size)));
  std::vector<double> ms;
  for (int i = 0; i < 12; ++i) {
    const auto k0 = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR((*kernel)->Run(batch, out.data(), stream.get()));
    KILN_RETURN_IF_ERROR(stream.Synchronize());
    if (i >= 2) ms.push_back(SecondsSince(k0) * 1e3);
  }
  loader.Release();
  std::sort(ms.begin(), ms.end());
  r->kernel_ms = ms[ms.size() / 2];
  const double moved = static_cast<double>(batch.bytes()) + (*kernel)->output_bytes(batch.size);
  r->kernel_gbps = r->kernel_ms > 0 ? moved / (r->kernel_ms / 1e3) / 1e9 : 0;
  return Status::Ok();
}

namespace {

// The report's fields that the options and the page cache decide, before the loader opens.
void DescribeRun(const std::vector<std::string>& dirs, const BenchOptions& options,
                 BenchReport* r) {
  r->dir.clear();
  for (const std::string& dir : dirs) r->dir += (r->dir.empty() ? "" : ",") + dir;
  r->consumer_ms = options.consumer_ms;
  r->resident_fraction = ResidentFractionOf(dirs);
  r->cache = options.cold || r->resident_fraction < 0.05 ? "cold"
             : r->resident_fraction >= 0.95              ? "warm"
                                                         : "partly warm";
  r->shuffle = options.loader.shuffle == ShuffleMode::kBlock  ? "block"
               : options.loader.shuffle == ShuffleMode::kNone ? "none"
                                                              : "exact";
  if (options.loader.shuffle == ShuffleMode::kBlock) {
    r->block_bytes = options.loader.block_bytes;
    r->shuffle_window = options.loader.shuffle_window;
  }
  r->disk_mb_per_s = options.disk_mb_per_s;
  r->device = options.loader.device;
}

// The report's stage times and counters, from the loader's statistics after the run.
void RecordLoaderStats(const LoaderStats& stats, const BenchOptions& options, BenchReport* r) {
  r->slot_wait_seconds = stats.slot_wait_ns / 1e9;
  r->fetch_seconds = stats.fetch_ns / 1e9;
  r->fetch_cpu_seconds = stats.fetch_cpu_ns / 1e9;
  r->storage_wait_seconds = std::max(0.0, r->fetch_seconds - r->fetch_cpu_seconds);
  r->decompress_seconds = stats.decompress_ns / 1e9;
  r->augment_seconds = stats.augment_ns / 1e9;
  r->zstd_records = stats.zstd_records;
  r->read_ahead_window_bytes = options.loader.read_ahead_bytes;
  r->read_ahead_samples = stats.read_ahead_samples;
  r->read_ahead_mb = stats.read_ahead_bytes / 1e6;
  r->read_ahead_seconds = stats.read_ahead_ns / 1e9;
  r->residency_probes = stats.residency_probes;
  r->residency_misses = stats.residency_misses;
  r->direct_reads = stats.direct_reads;
  r->direct_read_mb = stats.direct_read_bytes / 1e6;
  r->direct_max_in_flight = stats.direct_max_in_flight;
  r->remote_requests = stats.requests.requests;
  r->remote_retries = stats.requests.retries;
  r->remote_failures = stats.requests.failures;
  r->remote_hedges = stats.requests.hedges;
  r->remote_hedge_wins = stats.requests.hedge_wins;
  r->remote_mb = stats.requests.bytes / 1e6;
  r->remote_cache_reads = stats.requests.cache_reads;
  r->remote_cache_mb = stats.requests.cache_bytes / 1e6;
  r->remote_p50_ms = stats.requests.LatencyQuantileUs(0.5) / 1e3;
  r->remote_p99_ms = stats.requests.LatencyQuantileUs(0.99) / 1e3;
  // The parts add up to the fetch time by construction, all wall time: zstd and crop/flip are
  // timed around their calls (so they include the page faults and preemption inside them),
  // copy is the rest. The off-CPU time (storage_wait_seconds) is a second view of the same
  // fetch time, spread over the parts, not one more part.
  r->decompress_seconds = std::min(r->decompress_seconds, r->fetch_seconds);
  r->augment_seconds =
      std::min(r->augment_seconds, r->fetch_seconds - r->decompress_seconds);  // an estimate
  r->copy_seconds = r->fetch_seconds - r->decompress_seconds - r->augment_seconds;
  r->consumer_wait_seconds = stats.consumer_wait_ns / 1e9;
}

// Epoch 0's check for a mixture (BenchReport::sources): `counts` holds how often each
// concatenated index was served (padding excluded), `per_source` the samples of each source.
bool MixtureEpochOnce(const MixtureSchedule& m, const std::vector<uint32_t>& counts,
                      const std::vector<uint64_t>& per_source, uint32_t world_size) {
  for (size_t s = 0; s < m.num_sources(); ++s) {
    const uint64_t n = m.source_samples(s), c = m.quota(s);
    const uint64_t low = c / n, high = low + (c % n != 0 ? 1 : 0);
    uint64_t at_high = 0;
    for (uint64_t j = 0; j < n; ++j) {
      const uint32_t k = counts[m.offset(s) + j];
      if (k > high || (world_size == 1 && k < low)) return false;
      at_high += k == high && high != low;
    }
    if (world_size == 1 && (per_source[s] != c || at_high != c % n)) return false;
  }
  return true;
}

}  // namespace

Result<BenchReport> RunBench(const std::string& dir, const BenchOptions& options) {
  return RunBench(std::vector<std::string>{dir}, options);
}

Result<BenchReport> RunBench(const std::vector<std::string>& dirs, const BenchOptions& options) {
  if (dirs.empty()) return Status::InvalidArgument("kiln bench: no dataset given");
  if (dirs.size() > 1 && !options.mixture) {
    return Status::InvalidArgument("kiln bench: " + std::to_string(dirs.size()) +
                                   " datasets without a mixture (give --weights or --repeats)");
  }
  BenchReport r;
  if (options.cold) {
    for (const std::string& dir : dirs) {
      if (Dataset::IsUrl(dir)) {
        return Status::InvalidArgument(
            "kiln bench --cold drops a dataset's files from the page cache, and " + dir +
            " has no local files: every read of a URL is a request already (drop --cold; to "
            "time a local cache of it, point KILN_REMOTE_CACHE_DIR at a new directory)");
      }
      KILN_RETURN_IF_ERROR(DropPageCache(dir));
    }
  }
  DescribeRun(dirs, options, &r);
  if (r.device >= 0) {
    std::string why;
    if (!CudaDeviceAvailable(&why)) {
      return Status::NotSupported("kiln bench --device " + std::to_string(r.device) +
                                  ": no GPU: " + why + "; nothing measured");
    }
  }
  const Usage open_usage = GetUsage();
  const auto open_start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Loader> loader,
                        options.mixture
                            ? Loader::OpenMixture(dirs, *options.mixture, options.loader)
                            : Loader::Open(dirs[0], options.loader));
  const MixtureSchedule* mixture = loader->mixture();
  if (mixture != nullptr) {
    r.mixture_samples_per_epoch = mixture->samples_per_epoch();
    for (size_t s = 0; s < mixture->num_sources(); ++s) {
      BenchSource src;
      src.dir = dirs[s];
      if (!options.mixture->weights.empty()) src.weight = options.mixture->weights[s];
      if (!options.mixture->repeats.empty()) src.repeat = options.mixture->repeats[s];
      src.num_samples = mixture->source_samples(s);
      src.quota = mixture->quota(s);
      r.sources.push_back(src);
    }
  }
  if (r.device >= 0 && !loader->device_batches()) {
    return Status::NotSupported("kiln bench --device " + std::to_string(r.device) +
                                ": the loader fell back to host batches; nothing measured");
  }
  r.open_seconds = SecondsSince(open_start);
  r.threads = loader->num_threads();
  r.io = IoModeName(loader->io_path());
  r.io_reason = loader->io_reason();
  if (const std::optional<BlockMemoryFit>& fit = loader->block_memory_fit(); fit) {
    r.memory_fit_warning = BlockMemoryFitWarning(*fit);
  }
  r.direct_depth = loader->direct_depth();
  r.prefetch = options.loader.prefetch;
  r.batch_size = options.loader.batch_size;
  r.pinned = loader->pinned();
  r.epochs = options.epochs;
  r.jpeg_records = !mixture && loader->dataset().jpeg_records();
  const uint64_t n = loader->dataset().num_samples();
  // One dataset: whether each sample was seen in epoch 0. A mixture: how often each
  // concatenated index was, and the samples of each source over all epochs.
  std::vector<uint8_t> seen(mixture ? 0 : n, 0);
  std::vector<uint32_t> counts(mixture ? n : 0, 0);
  std::vector<uint64_t> per_source_epoch0(r.sources.size(), 0);
  uint64_t first_epoch_samples = 0;
  bool duplicates = false;
  const auto consumer_step = std::chrono::duration<double, std::milli>(options.consumer_ms);
  const Usage start_usage = GetUsage();
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t e = 0; e < options.epochs; ++e) {
    if (e == 1) {  // N bytes: not the loader's memory
      std::vector<uint8_t>().swap(seen);
      if (mixture != nullptr) {
        r.every_sample_once =
            MixtureEpochOnce(*mixture, counts, per_source_epoch0, options.loader.world_size);
      }
      std::vector<uint32_t>().swap(counts);
    }
    loader->SetEpoch(options.loader.start_epoch + e);
    Batch batch;
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool more, loader->Next(&batch));
      if (!more) break;
      if (r.batches == 0) {
        r.first_batch_seconds = SecondsSince(open_start);
        r.first_batch_wait_seconds = loader->stats().consumer_wait_ns / 1e9;
      }
      ++r.batches;
      r.samples += batch.size;
      r.bytes += batch.bytes();
      for (uint32_t k = 0; k < batch.size; ++k) {
        // In a mixture the index within the source, made concatenated (distinct per source).
        const uint64_t index =
            batch.sample_indices[k] + (mixture ? mixture->offset(batch.sources[k]) : 0);
        r.checksum ^=
            SplitMix64Mix(index * 0x100000001B3ull ^ static_cast<uint64_t>(batch.labels[k]));
        if (mixture != nullptr) {
          if (!batch.is_padding[k]) {
            ++r.sources[batch.sources[k]].samples_read;
            if (e == 0) {
              ++counts[index];
              ++per_source_epoch0[batch.sources[k]];
              ++first_epoch_samples;
            }
          } else if (e == 0) {
            ++first_epoch_samples;
          }
        } else if (e == 0) {
          ++first_epoch_samples;
          if (!batch.is_padding[k]) {
            duplicates |= seen[batch.sample_indices[k]] != 0;
            seen[batch.sample_indices[k]] = 1;
          }
        }
      }
      if (options.consumer_ms > 0) {  // a training step that takes consumer_ms per batch
        const auto step_start = std::chrono::steady_clock::now();
        std::this_thread::sleep_for(consumer_step);
        r.consumer_seconds += SecondsSince(step_start);
      }
    }
  }
  r.seconds = SecondsSince(start);
  std::vector<uint8_t>().swap(seen);  // with --epochs 1 still held: not the loader's memory
  const Usage end_usage = GetUsage();
  const LoaderStats stats = loader->stats();
  r.cpu_seconds = end_usage.cpu_seconds - start_usage.cpu_seconds;
  r.major_faults = end_usage.major_faults - open_usage.major_faults;
  r.peak_rss_mb = end_usage.peak_rss_mb;
  r.rss_anon_mb = ProcStatusMb("RssAnon");  // with the loader still open
  r.rss_file_mb = ProcStatusMb("RssFile");
  RecordLoaderStats(stats, options, &r);
  const uint64_t expected = loader->samples_per_epoch();
  if (mixture == nullptr) {
    r.every_sample_once = !duplicates && first_epoch_samples == expected;
  } else {
    if (options.epochs == 1) {
      r.every_sample_once =
          MixtureEpochOnce(*mixture, counts, per_source_epoch0, options.loader.world_size);
    }
    r.every_sample_once &= first_epoch_samples == expected;
    std::vector<uint32_t>().swap(counts);
  }
  r.samples_per_s = r.seconds > 0 ? r.samples / r.seconds : 0;
  r.mb_per_s = r.seconds > 0 ? r.bytes / 1e6 / r.seconds : 0;
  r.consumer_wait_fraction = r.seconds > 0 ? stats.consumer_wait_ns / 1e9 / r.seconds : 0;
  if (r.device >= 0) KILN_RETURN_IF_ERROR(MeasureDevice(*loader, options, &r));
  Diagnose(&r);
  // The loader fills prefetch + 1 slots before the consumer's first wait is over: a run of not
  // many more batches than that measures start-up, not the steady rate.
  const uint64_t fill = uint64_t{r.prefetch} + 1;
  if (r.batches < 4 * fill) {
    r.short_run_note = "note: only " + std::to_string(r.batches) + " batches, fewer than 4x the " +
                       std::to_string(fill) +
                       " the loader fills ahead (prefetch + 1): the rate mostly measures start-up; "
                       "use more --epochs, a smaller --batch-size or a larger dataset";
  } else if (r.seconds < kShortestTimedSeconds) {
    // Clock resolution and scheduling dominate below this: a rate would be noise.
    char took[64];
    std::snprintf(took, sizeof(took), "%.2f ms", r.seconds * 1e3);
    r.short_run_note = std::string("note: the timed part took ") + took +
                       ", too short for a meaningful rate; use more --epochs or a larger dataset";
  }
  return r;
}

Result<SweepReport> RunSweep(const std::string& dir, const BenchOptions& options, uint32_t cores) {
  return RunSweep(std::vector<std::string>{dir}, options, cores);
}

Result<SweepReport> RunSweep(const std::vector<std::string>& dirs, const BenchOptions& options,
                             uint32_t cores) {
  SweepReport sweep;
  std::vector<uint32_t> threads;
  const uint32_t max_threads = std::min<uint32_t>(256, 2 * std::max(1u, cores));
  for (uint32_t t = 1; t <= max_threads; t *= 2) threads.push_back(t);
  if (threads.back() != max_threads) threads.push_back(max_threads);
  for (uint32_t t : threads) {
    for (uint32_t p : {1u, 2u, 4u, 8u}) {
      BenchOptions o = options;
      o.loader.num_threads = t;
      o.loader.prefetch = p;
      KILN_ASSIGN_OR_RETURN(BenchReport r, RunBench(dirs, o));
      sweep.runs.push_back(std::move(r));
    }
  }
  double best = 0;
  for (size_t i = 0; i < sweep.runs.size(); ++i) {
    const BenchReport& r = sweep.runs[i];
    sweep.comparable.push_back(r.seconds >= kSweepShortestCellSeconds && r.short_run_note.empty());
    if (sweep.comparable[i]) best = std::max(best, r.samples_per_s);
    if (r.samples_per_s > sweep.runs[sweep.shown].samples_per_s) sweep.shown = i;
  }
  for (size_t i = 0; i < sweep.runs.size(); ++i) {  // ordered by threads, then prefetch
    if (sweep.comparable[i] && sweep.runs[i].samples_per_s >= 0.97 * best) {
      sweep.recommended = i;
      sweep.shown = i;
      break;
    }
  }
  return sweep;
}

std::string SweepReportJson(const SweepReport& sweep) {
  const BenchReport& best = sweep.runs[sweep.shown];
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(BenchReportJson(best));
  if (sweep.recommended) {
    j["recommended"] = {{"threads", best.threads}, {"prefetch", best.prefetch}};
  } else {
    j["recommended"] = nullptr;
  }
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (size_t i = 0; i < sweep.runs.size(); ++i) {
    const BenchReport& r = sweep.runs[i];
    rows.push_back({{"threads", r.threads},
                    {"seconds", r.seconds},
                    {"comparable", static_cast<bool>(sweep.comparable[i])},
                    {"prefetch", r.prefetch},
                    {"samples_per_s", r.samples_per_s},
                    {"mb_per_s", r.mb_per_s},
                    {"consumer_wait_fraction", r.consumer_wait_fraction},
                    {"first_batch_seconds", r.first_batch_seconds},
                    {"bottleneck", r.bottleneck},
                    {"every_sample_once", r.every_sample_once}});
  }
  j["sweep"] = rows;
  return j.dump();
}

std::string SweepReportText(const SweepReport& sweep) {
  std::string out = "threads  prefetch  samples/s     MB/s  consumer wait  bottleneck\n";
  char line[256];
  for (size_t i = 0; i < sweep.runs.size(); ++i) {
    const BenchReport& r = sweep.runs[i];
    std::snprintf(line, sizeof(line), "%7u  %8u  %9.0f  %7.1f  %12.0f%%  %s%s%s\n", r.threads,
                  r.prefetch, r.samples_per_s, r.mb_per_s, 100 * r.consumer_wait_fraction,
                  r.bottleneck.c_str(), sweep.comparable[i] ? "" : "  (too short to compare)",
                  sweep.recommended == i ? "  <- recommended" : "");
    out += line;
  }
  if (!sweep.recommended) {
    std::snprintf(line, sizeof(line),
                  "no recommendation: every cell's timed part was shorter than %.1f s (or had "
                  "too few batches), so their rates measure start-up and scheduling, not the "
                  "loader; raise --epochs or use a larger dataset\n",
                  kSweepShortestCellSeconds);
    return out + line;
  }
  const BenchReport& best = sweep.runs[*sweep.recommended];
  std::snprintf(line, sizeof(line),
                "recommended: --threads %u --prefetch %u (%.0f samples/s; the fewest threads, "
                "then the shallowest prefetch, within 3%% of the best of the cells long enough "
                "to compare; %s cache)\n",
                best.threads, best.prefetch, best.samples_per_s, best.cache.c_str());
  out += line;
  return out;
}

std::string BenchReportJson(const BenchReport& r) {
  nlohmann::ordered_json j;
  j["dir"] = r.dir;
  j["samples"] = r.samples;
  j["bytes"] = r.bytes;
  j["batches"] = r.batches;
  j["epochs"] = r.epochs;
  j["seconds"] = r.seconds;
  j["samples_per_s"] = r.samples_per_s;
  j["mb_per_s"] = r.mb_per_s;
  j["open_seconds"] = r.open_seconds;
  j["first_batch_seconds"] = r.first_batch_seconds;
  j["consumer_wait_fraction"] = r.consumer_wait_fraction;
  j["threads"] = r.threads;
  j["prefetch"] = r.prefetch;
  j["batch_size"] = r.batch_size;
  j["pinned"] = r.pinned;
  j["every_sample_once"] = r.every_sample_once;
  j["checksum"] = r.checksum;
  j["shuffle"] = r.shuffle;
  j["block_bytes"] = r.block_bytes;
  j["shuffle_window"] = r.shuffle_window;
  j["disk_mb_per_s"] = r.disk_mb_per_s;
  j["disk_share"] = r.disk_mb_per_s > 0 ? r.mb_per_s / r.disk_mb_per_s : 0.0;
  j["cache"] = r.cache;
  j["resident_fraction"] = r.resident_fraction;
  j["slot_wait_seconds"] = r.slot_wait_seconds;
  j["fetch_seconds"] = r.fetch_seconds;
  j["fetch_cpu_seconds"] = r.fetch_cpu_seconds;
  j["storage_wait_seconds"] = r.storage_wait_seconds;
  j["decompress_seconds"] = r.decompress_seconds;
  j["augment_seconds"] = r.augment_seconds;
  j["copy_seconds"] = r.copy_seconds;
  j["upload_seconds"] = r.upload_seconds;
  if (r.device >= 0) {
    j["device"] = r.device;
    j["uploads"] = r.uploads;
    j["upload_gbps"] = r.upload_gbps;
    j["upload_copy_ms"] = r.upload_copy_ms;
    j["upload_hidden_share"] = r.upload_hidden_share;
    if (r.kernel_note.empty()) {
      j["kernel_fp16_ms"] = r.kernel_ms;
      j["kernel_fp16_gbps"] = r.kernel_gbps;
    } else {
      j["kernel"] = "not timed: " + r.kernel_note;
    }
  } else {
    j["upload"] = "none: host batches (give --device N to upload to a GPU)";
  }
  j["consumer_wait_seconds"] = r.consumer_wait_seconds;
  j["first_batch_wait_seconds"] = r.first_batch_wait_seconds;
  j["consumer_seconds"] = r.consumer_seconds;
  j["consumer_ms"] = r.consumer_ms;
  j["zstd_records"] = r.zstd_records;
  j["read_ahead_window_bytes"] = r.read_ahead_window_bytes;
  j["read_ahead_samples"] = r.read_ahead_samples;
  j["read_ahead_mb"] = r.read_ahead_mb;
  j["read_ahead_seconds"] = r.read_ahead_seconds;
  j["residency_probes"] = r.residency_probes;
  j["residency_misses"] = r.residency_misses;
  j["io"] = r.io;
  j["io_reason"] = r.io_reason;
  j["memory_fit_warning"] = r.memory_fit_warning;
  j["direct_depth"] = r.direct_depth;
  j["direct_reads"] = r.direct_reads;
  j["direct_read_mb"] = r.direct_read_mb;
  j["direct_max_in_flight"] = r.direct_max_in_flight;
  if (r.io == "remote") {
    j["remote"] = {{"requests", r.remote_requests},       {"retries", r.remote_retries},
                   {"failures", r.remote_failures},       {"hedges", r.remote_hedges},
                   {"hedge_wins", r.remote_hedge_wins},   {"mb", r.remote_mb},
                   {"latency_p50_ms", r.remote_p50_ms},   {"latency_p99_ms", r.remote_p99_ms},
                   {"cache_reads", r.remote_cache_reads}, {"cache_mb", r.remote_cache_mb}};
  }
  j["cpu_seconds"] = r.cpu_seconds;
  j["major_faults"] = r.major_faults;
  j["peak_rss_mb"] = r.peak_rss_mb;
  j["rss_anon_mb"] = r.rss_anon_mb;
  j["rss_file_mb"] = r.rss_file_mb;
  j["bottleneck"] = r.bottleneck;
  j["verdict"] = r.verdict;
  j["short_run_note"] = r.short_run_note;
  if (!r.sources.empty()) {
    nlohmann::ordered_json sources = nlohmann::ordered_json::array();
    for (const BenchSource& s : r.sources) {
      nlohmann::ordered_json e;
      e["dir"] = s.dir;
      if (s.weight > 0) e["weight"] = s.weight;
      if (s.repeat > 0) e["repeat"] = s.repeat;
      e["num_samples"] = s.num_samples;
      e["quota"] = s.quota;
      e["samples_read"] = s.samples_read;
      sources.push_back(e);
    }
    j["mixture"] = {{"samples_per_epoch", r.mixture_samples_per_epoch}, {"sources", sources}};
  }
  return j.dump();
}

std::string BenchReportText(const BenchReport& r) {
  char line[1024];
  std::snprintf(line, sizeof(line),
                "read %llu samples (%u epoch%s, %llu batches of %u) in %.3f s: %.0f samples/s, "
                "%.1f MB/s; %u threads, prefetch %u, %s memory; open %.1f ms, first batch "
                "%.1f ms; every sample read once: %s\n",
                static_cast<unsigned long long>(r.samples), r.epochs, r.epochs == 1 ? "" : "s",
                static_cast<unsigned long long>(r.batches), r.batch_size, r.seconds,
                r.samples_per_s, r.mb_per_s, r.threads, r.prefetch,
                r.pinned ? "pinned" : "pageable", r.open_seconds * 1e3, r.first_batch_seconds * 1e3,
                r.every_sample_once ? "yes" : "NO");
  std::string out = line;
  if (!r.sources.empty()) {
    std::snprintf(line, sizeof(line),
                  "mixture of %zu datasets, %llu samples per epoch:", r.sources.size(),
                  static_cast<unsigned long long>(r.mixture_samples_per_epoch));
    out += line;
    for (size_t s = 0; s < r.sources.size(); ++s) {
      const BenchSource& src = r.sources[s];
      std::snprintf(line, sizeof(line),
                    "%s %s (%s %g): %llu samples read, quota %llu per epoch of its %llu",
                    s ? ";" : "", src.dir.c_str(), src.weight > 0 ? "weight" : "repeat",
                    src.weight > 0 ? src.weight : src.repeat,
                    static_cast<unsigned long long>(src.samples_read),
                    static_cast<unsigned long long>(src.quota),
                    static_cast<unsigned long long>(src.num_samples));
      out += line;
    }
    out += "\n";
  }
  char ahead[160] = "";
  if (r.read_ahead_samples > 0) {
    std::snprintf(ahead, sizeof(ahead), "; read ahead %llu samples, %.0f MB, in %.2f s",
                  static_cast<unsigned long long>(r.read_ahead_samples), r.read_ahead_mb,
                  r.read_ahead_seconds);
  }
  if (r.io == "remote" && r.direct_depth == 0) {
    // Records read one at a time through the dataset's store (a mixture's sources at a URL):
    // no staging reads to count; the requests are on the "remote:" line.
    std::snprintf(line, sizeof(line), "io remote (%s)\n", r.io_reason.c_str());
  } else if (r.io == "direct" || r.io == "remote") {
    std::snprintf(line, sizeof(line),
                  "io %s (%s): %llu reads, %.0f MB, up to %llu in flight per thread (depth "
                  "%u)\n",
                  r.io.c_str(), r.io_reason.c_str(),
                  static_cast<unsigned long long>(r.direct_reads), r.direct_read_mb,
                  static_cast<unsigned long long>(r.direct_max_in_flight), r.direct_depth);
  } else {
    std::snprintf(line, sizeof(line), "io mmap (%s)\n", r.io_reason.c_str());
  }
  out += line;
  if (r.io == "remote") {
    std::snprintf(line, sizeof(line),
                  "remote: %llu range GETs (%llu retries, %llu failed, %llu hedged, %llu hedges "
                  "won), %.1f MB, latency p50 %.1f ms, p99 %.1f ms per request\n",
                  static_cast<unsigned long long>(r.remote_requests),
                  static_cast<unsigned long long>(r.remote_retries),
                  static_cast<unsigned long long>(r.remote_failures),
                  static_cast<unsigned long long>(r.remote_hedges),
                  static_cast<unsigned long long>(r.remote_hedge_wins), r.remote_mb,
                  r.remote_p50_ms, r.remote_p99_ms);
    out += line;
    if (r.remote_cache_reads > 0) {
      std::snprintf(line, sizeof(line), "local cache: %llu reads, %.1f MB (no request)\n",
                    static_cast<unsigned long long>(r.remote_cache_reads), r.remote_cache_mb);
      out += line;
    }
  }
  std::snprintf(line, sizeof(line),
                "%s order, %s cache (%.0f%% of the files resident at open%s); stages (s, fetch "
                "threads summed): slot wait %.3f, fetch %.3f = [decompress %.3f + augment %.3f "
                "+ copy %.3f], of which off the CPU (storage, preemption) %.3f; upload 0 (no "
                "GPU); consumer: wait %.3f, work %.3f; CPU %.2f s, %llu major faults, peak RSS "
                "%.1f MB\n",
                r.shuffle == "none" ? "dataset (unshuffled)" : r.shuffle.c_str(), r.cache.c_str(),
                100 * r.resident_fraction, ahead, r.slot_wait_seconds, r.fetch_seconds,
                r.decompress_seconds, r.augment_seconds, r.copy_seconds, r.storage_wait_seconds,
                r.consumer_wait_seconds, r.consumer_seconds, r.cpu_seconds,
                static_cast<unsigned long long>(r.major_faults), r.peak_rss_mb);
  out += line;
  if (r.device >= 0) {
    std::snprintf(line, sizeof(line),
                  "device %d: %llu uploads, pinned H2D %.2f GB/s (%.3f ms per full batch), host "
                  "waited %.3f s for copies: %.0f%% of the copy time hidden behind the consumer "
                  "(--consumer-ms %.3g)\n",
                  r.device, static_cast<unsigned long long>(r.uploads), r.upload_gbps,
                  r.upload_copy_ms, r.upload_seconds, 100 * r.upload_hidden_share, r.consumer_ms);
    out += line;
    if (r.kernel_note.empty()) {
      std::snprintf(line, sizeof(line),
                    "fused normalise kernel (fp16, one batch): %.3f ms median, %.1f GB/s read + "
                    "written\n",
                    r.kernel_ms, r.kernel_gbps);
      out += line;
    } else {
      out += "fused normalise kernel: not timed: " + r.kernel_note + "\n";
    }
  }
  out += r.verdict + "\n";
  if (!r.short_run_note.empty()) out += r.short_run_note + "\n";
  return out;
}

}  // namespace kiln
