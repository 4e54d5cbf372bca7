// kiln::Loader: streams shuffled batches of a packed dataset into a fixed ring of host batch
// slots with a pool of fetch threads (and, with LoaderOptions::device, into device buffers).
//
//   dataset -> sampler (seed, epoch, rank) -> fetch threads -> batch slots -> Next()
//
// The design (its parts, the read path, the device upload protocol, resume, processes, memory
// bounds) is reader/loader.md; this header keeps the contract.
//
// Ownership: a Loader holds its Dataset by shared_ptr (keeping it alive), and owns its
// `num_threads` fetch threads, its `prefetch + 1` batch slots (allocated once at Create: pinned
// when a CUDA device is present and pin_memory is set, page-aligned host memory otherwise), and
// on the direct path one RangeReader per thread; with device batches also its DeviceRing (an
// upload stream, one device buffer per slot, events).
// Guarantees: batches arrive in sampler order, byte-identical whatever num_threads, prefetch and
// the io path are; the order depends only on (seed, epoch); every rank gets
// batches_per_epoch() batches (TailPolicy in reader/sampler.h). Memory does not grow with the
// number of samples.
// Thread safety: one consumer thread calls SetEpoch/Next/Release/state; the fetch threads are
// internal. A Loader belongs to the process that created it: in a forked child, Next() returns
// NotSupported (CheckProcess), never the parent's batches ("Processes" in reader/loader.md).
// Lifetimes: a Batch's pointers stay valid until the next call to Next(), SetEpoch() or
// Release(), or the Loader's destruction, whichever comes first. Copy what you keep. For device
// batches "valid" means: GPU work that reads the batch must be *enqueued* (on a stream given to
// WaitOn) before that call; it may run later, the loader waits for it on the GPU. Streams given
// to WaitOn must stay alive until the batch is released, and must belong to `device`.
// Errors: Create returns InvalidArgument for options out of range, OutOfRange for slot memory
// it cannot allocate, IOError for a fetch thread it cannot start (threads already started are
// joined first), and the resume refusals listed at LoaderOptions::resume. A fetch thread's
// failure (a corrupt record, say) is stored with its batch and returned by the Next() that
// reaches it, naming file, record and byte offset; the next call continues with the following
// batch.
#ifndef KILN_READER_LOADER_H_
#define KILN_READER_LOADER_H_

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "formats/dataset.h"
#include "formats/status.h"
#include "reader/augmenter.h"
#include "reader/cuda_handles.h"
#include "reader/device_ops.h"
#include "reader/device_ring.h"
#include "reader/direct_reader.h"
#include "reader/fetch_schedule.h"
#include "reader/host_buffer.h"
#include "reader/jpeg_sample_decoder.h"
#include "reader/mixture.h"
#include "reader/mixture_dataset.h"
#include "reader/range_reader.h"
#include "reader/reader_state.h"
#include "reader/sampler.h"

namespace kiln {

// Lets Dataset::Open take s3:// and http(s):// URLs of shards datasets (reader/remote/
// remote_dataset.h) where this build has the remote reader (libcurl, KILN_WITH_REMOTE); returns
// false where it does not. Loader::Open, the kiln CLI and the Python module call it. Thread
// safety: call before opening datasets from other threads; calling it again is harmless.
bool EnableRemoteDatasets();

class StatsExporter;  // reader/stats_export.h
namespace remote {
class DiskCache;    // reader/remote/disk_cache.h
class RemoteStore;  // reader/remote/remote_dataset.h
}  // namespace remote

// How fetch threads read stored records (LoaderOptions::io).
enum class IoMode {
  kAuto,    // kDirect when the dataset is larger than half the memory the process may use and
            // kDirect is available (see LoaderOptions::io), kMmap otherwise
  kMmap,    // copy from the file mappings, with madvise read-ahead (read_ahead_bytes)
  kDirect,  // io_uring reads with O_DIRECT into staging buffers, bypassing the page cache
  kRemote,  // range GETs into staging buffers (reader/remote): the path of every dataset opened
            // from an s3:// or http(s):// URL, whatever `io` asks, and of a mixture with a source
            // at one (that source's records read one range GET each); never asked itself
};
// Returns "auto", "mmap", "direct" or "remote".
const char* IoModeName(IoMode mode);
// Parses "auto", "mmap" or "direct". Errors: InvalidArgument naming the text.
Result<IoMode> ParseIoMode(const std::string& name);

// The memory block order needs on the mmap path (IoMode::kMmap, LoaderOptions::shuffle kBlock).
// The rule, from the README ("Data larger than memory"): "On the `mmap` path the window's blocks
// (`block_bytes * window`, 64 MiB by default) plus `read_ahead_bytes` must fit in memory"; the
// batch slots the loader allocates count against the same memory limit. When the sum exceeds
// the limit, pages of the window are evicted before they are read and read again (the page
// cache thrashes: a fraction of the rate, thousands of major faults), and larger blocks make it
// worse. All sizes in bytes.
struct BlockMemoryFit {
  uint64_t block_bytes = 0;         // one block as the sampler makes it: block_samples x stored
                                    // sample bytes (blocks shrink on small datasets)
  uint32_t window_blocks = 0;       // LoaderOptions::shuffle_window
  uint64_t read_ahead_bytes = 0;    // LoaderOptions::read_ahead_bytes
  uint64_t slot_bytes = 0;          // the batch slots: (prefetch + 1) x (batch data + labels)
  uint64_t memory_limit_bytes = 0;  // MemoryLimitBytes() (reader/direct_reader.h); 0: unknown

  uint64_t window_bytes() const { return block_bytes * window_blocks; }
  // window_bytes() + read_ahead_bytes + slot_bytes.
  uint64_t needed_bytes() const { return window_bytes() + read_ahead_bytes + slot_bytes; }
  // True when the memory limit is unknown or needed_bytes() is at most the limit.
  bool fits() const { return memory_limit_bytes == 0 || needed_bytes() <= memory_limit_bytes; }
};

// Returns "" when `fit` fits, else the warning the loader prints: the rule, the numbers (MiB)
// and the cures (a smaller shuffle_window or block_bytes that fits, read_ahead_bytes, or
// io=direct), naming both the LoaderOptions fields and `kiln bench`'s flags.
std::string BlockMemoryFitWarning(const BlockMemoryFit& fit);

struct LoaderOptions {
  uint32_t batch_size = 256;  // samples per batch, >= 1. Default 256.
  // The read order (reader/sampler.h): kExact, a new global permutation every epoch (for data
  // in memory or on fast NVMe); kBlock, permuted blocks of consecutive samples dealt to ranks
  // and shuffled within a window (for data larger than memory); kNone, dataset order.
  // Default kExact.
  ShuffleMode shuffle = ShuffleMode::kExact;
  // kBlock: bytes per block, converted to block_samples = max(1, block_bytes / stored
  // sample_bytes) (the stored, pre-crop sample size). Range [1, 2^40]. Default 4 MiB.
  // kNone at a URL on one or two ranks: the extent read with one GET, several read ahead
  // (reader/remote/remote.md, "Reading a dataset").
  uint64_t block_bytes = uint64_t{4} << 20;
  // kBlock: blocks per shuffle window; samples are shuffled among shuffle_window consecutive
  // blocks of a rank's share, so about block_bytes * shuffle_window bytes are read at random
  // at a time. Range [1, 2^20]. Default 16 (64 MiB windows with the default block_bytes).
  uint32_t shuffle_window = 16;
  uint64_t seed = 0;       // permutation and augmentation seed. Default 0.
  bool drop_last = false;  // drop each rank's last partial batch. Default false.
  TailPolicy tail_policy = TailPolicy::kShort;  // uneven rank shares; see sampler.h.
  uint32_t rank = 0;         // this process's rank, in [0, world_size). Default 0.
  uint32_t world_size = 1;   // ranks reading the dataset together. Default 1.
  uint32_t num_threads = 0;  // fetch threads; 0 = the machine's hardware threads. Max 256.
  uint32_t prefetch = 2;     // batches filled ahead of the consumer, [1, 64]. Default 2.
  bool pin_memory = true;    // pinned slots when a CUDA device is present. Default true.
  // Random crop, RandomResizedCrop, center crop and flip. Default off. A dataset of JPEG
  // records (Dataset::jpeg_records) needs an output size: RandomResizedCrop (resize_height/
  // resize_width) or the center crop (center_crop_height/center_crop_width); Create refuses it
  // otherwise (InvalidArgument naming both), and refuses a plain crop (reader/loader.md, "JPEG
  // records").
  AugmentOptions augment;
  uint64_t start_epoch = 0;  // the epoch the first Next() serves (resume). Default 0.
  // Read-ahead: stored bytes of upcoming samples that the loader asks the kernel to read into
  // the page cache ahead of time (AdviseWillNeed in formats/mapped_file.h), so that a few
  // threads keep many reads in flight when the dataset is not in memory. Exact and none orders:
  // the read_ahead_bytes / sample_bytes samples (at least 1, and at least the chunk being
  // claimed) after the start of each chunk a fetch thread claims, in read order, within the
  // epoch. Block order: whole blocks, those of the shuffle window(s) the claimed batch reads
  // (which must be in memory anyway: block_bytes * shuffle_window) plus read_ahead_bytes of
  // blocks past them. So the page cache held by samples advised but not yet read is about
  // read_ahead_bytes plus the batches being filled (plus one window in block order); compressed
  // records take less. Advice costs a system call per run of records even when the data is
  // resident, so the loader gives it only while reads miss the page cache: each extension first
  // checks up to 4 of its samples' pages (mincore) and advises when one of them, or of the last
  // 64 checked, was not resident. With read-ahead on, the dataset's mappings also get random
  // (exact order) or sequential (block, none) access advice, which turns off the kernel's read-
  // around of each fault and keeps reclaim from favouring pages already read over pages read
  // ahead (AccessAdvice in formats/mapped_file.h). 0 turns read-ahead off: each miss is read
  // by a page fault, one at a time per thread, with the kernel's read-around (read_ahead_kb, 8
  // MiB on some machines: random reads of larger-than-memory data then thrash). Backends that
  // do not read from a mapping (LMDB) ignore it. Keep it well under the memory the process may
  // use for page cache: pages evicted before they are read are read twice. BENCHMARKS.md,
  // "Larger than memory", has the measurements. Range [0, 4 GiB]. Default 16 MiB.
  uint64_t read_ahead_bytes = uint64_t{16} << 20;
  // How records are read (IoMode). kMmap copies from the dataset's file mappings: the page
  // cache holds what was read, so data that fits in memory is read from storage once, and
  // read_ahead_bytes above keeps reads in flight when it does not. kDirect reads each record's
  // covering aligned range with O_DIRECT through one io_uring per fetch thread into staging
  // buffers and checks and decodes it from there (reader/direct_reader.h): no page cache, no
  // page faults, no reclaim, so data larger than memory reads at the device's rate; but every
  // epoch reads from storage again. In flight: up to read_ahead_bytes of reads (at least one
  // record per thread), each thread keeping its share full across chunks (it claims its next
  // chunk while the last reads of the current one are in flight), in file order within a chunk
  // so that neighbouring records merge into one device request; that is also the staging
  // memory the loader holds: threads x depth x (one record's size rounded up to the alignment,
  // plus one alignment unit), at most about read_ahead_bytes, at least one such buffer per
  // thread; plus one descriptor per data file. kAuto picks kDirect when
  // the files' total size exceeds half the memory this process may use (MemoryLimitBytes in
  // reader/direct_reader.h: the smaller of the machine's RAM and the cgroup's memory limit),
  // every file accepts O_DIRECT and io_uring works; kMmap otherwise. kDirect falls back to
  // kMmap, with one warning, where the backend has no direct reads (LMDB reads through its
  // library; HDF5 files stay on their mapping) or io_uring is unavailable (built without liburing,
  // seccomp, old kernels); where the filesystem refuses O_DIRECT (tmpfs) it reads buffered through
  // io_uring. io_path() says which path a loader uses and why. Batches are byte-identical whichever
  // path reads them. Default kAuto.
  IoMode io = IoMode::kAuto;
  // A dataset at a URL: hedged requests for the slow tail (reader/remote/remote.md, "Hedged
  // requests"). A range GET still running after max(remote_hedge_min_ms, remote_hedge_p95_multiple
  // x the p95 latency of its client's completed GETs) gets a second identical request (same
  // If-Match); the first to finish gives the bytes, the other is cancelled; at most one read in
  // ten is hedged and none before 16 GETs have completed. Counted in LoaderStats::requests
  // (hedges, hedge_wins). remote_hedge_p95_multiple 0 turns hedging off; range [0, 1000].
  // remote_hedge_min_ms: range [0, 3600000]. Unset: the environment's
  // KILN_REMOTE_HEDGE_P95_MULTIPLE and KILN_REMOTE_HEDGE_MIN_MS, else 3 and 100. Ignored for
  // local datasets.
  std::optional<double> remote_hedge_p95_multiple;
  std::optional<int64_t> remote_hedge_min_ms;
  // A dataset at a URL: a local cache of its shards' bytes (reader/remote/disk_cache.md) in
  // directory remote_cache_dir (created if missing; several processes may share it), at most
  // remote_cache_bytes bytes of it used (0: as much as the file system allows, always leaving
  // min(1 GiB, 5%) free). A thread downloads the shards' pieces in dataset order until the cache
  // is full; reads of pieces it holds are served from local disk (LoaderStats::requests'
  // cache_reads, cache_bytes) and once full it keeps what it holds (for an epoch's scan LRU would
  // keep nothing). Empty: the environment's KILN_REMOTE_CACHE_DIR (and KILN_REMOTE_CACHE_BYTES),
  // else no cache. Ignored for local datasets. Errors (Create): IOError naming the directory
  // when it cannot be made or written.
  std::string remote_cache_dir;
  std::optional<uint64_t> remote_cache_bytes;
  // A state saved by Loader::state() ("Checkpoint and resume" in reader/loader.md): Create
  // refuses, naming what differs, InvalidArgument for a state of another dataset (fingerprint
  // or sample count), seed, shuffle mode, block size or window, augmentation, a kBlock state
  // restored mid-epoch with another world size or batch size, or a start_epoch other than 0 or
  // the state's epoch; NotSupported for another sampler order version; OutOfRange for a
  // position past the end of its epoch. The first Next()
  // serves the batch after the saved position, in the saved epoch (start_epoch must then be 0
  // or that epoch). SetEpoch() with the state's epoch before the first Next() keeps the
  // position; SetEpoch() with another epoch starts that epoch from its beginning, and later
  // epochs always start from their beginning. Default none.
  std::optional<ReaderState> resume;
  // CUDA device that receives every batch ("Device batches" in reader/loader.md); -1 for host
  // batches only. Falls back to host batches, with one warning, where no usable device exists.
  // Range [-1, device count). Default -1.
  int device = -1;
  // With device == -1 and pin_memory: the CUDA device made current while the pinned slots are
  // allocated. Pinned memory is usable from every device (unified addressing); this only picks
  // whose context the allocation uses or creates, so a process meant for GPU N (a DDP rank
  // that copies batches to cuda:N itself) creates no context on GPU 0. -1: the calling
  // thread's current device in kiln's CUDA runtime (0 unless kiln made another current). With
  // device >= 0 the slots are allocated on `device` and this is ignored. Range [-1, device
  // count); an index with no device leaves the allocation on the current device. Default -1.
  int pin_device = -1;
  // Periodic statistics export (reader/stats_export.h, reader/stats_export.md): every
  // stats_interval_s seconds the loader's thread appends one JSON line of stats() to
  // stats_dir/kiln-stats-rank{rank}.jsonl and rewrites stats_dir/kiln-stats-rank{rank}.prom
  // (Prometheus text), and writes a final line at destruction. Empty: the environment variable
  // KILN_STATS_DIR when set, else no export. The directory is created when missing; Create fails
  // with IOError naming the path when it cannot be created or written. Default empty.
  std::string stats_dir;
  // Seconds between export lines: 0 means KILN_STATS_INTERVAL when set, else 10. Range 0 or
  // [0.01, 86400]. Default 0.
  double stats_interval_s = 0;
};

// A mixture of several datasets for Loader::CreateMixture / OpenMixture (reader/mixture.md): how
// much of each dataset an epoch draws, and the epoch's length.
struct MixtureOptions {
  // One per dataset, in the datasets' order: the proportion of each epoch's samples drawn from
  // it (normalised over the datasets), each > 0. Give weights or repeats, not both. Default
  // empty.
  std::vector<double> weights;
  // One per dataset: samples drawn per epoch = repeat x the dataset's samples (1: once, 3:
  // upsampled 3x, 0.5: half of it), each > 0. Default empty.
  std::vector<double> repeats;
  // Samples of an epoch, all ranks together (N). 0: with weights, the datasets' total samples
  // (one pass over the total, split by weight); with repeats, the sum of repeat x samples.
  // Default 0.
  uint64_t samples_per_epoch = 0;
};

// Returns OK when `options` is usable for any dataset, else InvalidArgument naming the first
// option out of its documented range ("prefetch 0 must be in [1, 64]"). Loader::Create calls
// it; `kiln bench` and the Python bindings (kiln.Loader) report these same messages. Checks
// that need the dataset (a crop larger than the samples, a resume state of another dataset, a
// device index past the device count) are Create's.
Status ValidateLoaderOptions(const LoaderOptions& options);

// One batch: `size` samples in one contiguous block, sample k at data + k * sample_bytes.
struct Batch {
  uint64_t epoch = 0;
  uint64_t index = 0;   // step in the epoch, from 0 (after a resume, see Sampler::first_step)
  uint32_t size = 0;    // samples; batch_size except a last partial (or empty) batch
  TensorSchema schema;  // of each sample (after any crop)
  const uint8_t* data = nullptr;             // [size, schema shape], schema dtype, LE
  const int64_t* labels = nullptr;           // [size]
  const uint64_t* sample_indices = nullptr;  // [size] dataset indices (in a mixture: within
                                             // the sample's own source dataset)
  // [size] a mixture's source of each sample: the index of its dataset in the list given to
  // Loader::CreateMixture. Null for a loader over one dataset.
  const uint32_t* sources = nullptr;
  const uint8_t* is_padding = nullptr;  // [size] 1 for padding (TailPolicy::kPad)
  bool pinned = false;                  // data lives in pinned memory
  // Device batches only (null and -1 otherwise); valid for the same time as `data`, and to be
  // read only by work ordered after ready_event (see WaitOn):
  const void* device_data = nullptr;       // [size, schema shape], like data, on `device`
  const int64_t* device_labels = nullptr;  // [size], on `device`
  void* ready_event = nullptr;             // cudaEvent_t, completes when the upload is done
  int device = -1;                         // the CUDA device holding device_data
  uint64_t bytes() const { return uint64_t{size} * schema.sample_bytes(); }

  // Makes `consumer_stream` (nullptr: the legacy default stream) wait for this batch's upload
  // without blocking the host (cudaStreamWaitEvent), and names it as the stream whose work the
  // loader waits for before reusing the device buffer (step 2 of the protocol, reader/loader.md).
  // Call it before enqueueing work that reads device_data. Errors: InvalidArgument for a batch
  // without a device copy; CudaStatus("cudaStreamWaitEvent").
  Status WaitOn(cudaStream_t consumer_stream) const;

  void* device_slot_ = nullptr;     // internal: the loader's per-slot device state
  uint64_t device_generation_ = 0;  // internal: the upload this batch saw
};

// Cumulative counters since Create(), for `kiln bench`, kiln.Loader.stats() and the statistics
// export (reader/stats_export.h). Counters are monotonic. Stage times: a fetch thread's time
// filling chunks is fetch_ns; of it, fetch_cpu_ns on the CPU, the rest off it (storage_ns():
// page faults, direct or remote reads, preemption); of the CPU part, decompress_ns and
// augment_ns, the rest decoding and copying into the slot (copy_ns()). Times are summed over
// the fetch threads, so fetch_ns + slot_wait_ns + read_ahead_ns <= threads x wall time.
struct LoaderStats {
  uint64_t batches = 0;           // batches returned by Next()
  uint64_t samples = 0;           // samples in them
  uint64_t bytes = 0;             // sample bytes in them
  uint64_t consumer_wait_ns = 0;  // time Next() spent waiting for a batch to be filled
  uint64_t fetch_ns = 0;          // time fetch threads spent reading samples (all threads)
  uint64_t slot_wait_ns = 0;      // time fetch threads spent waiting for a free slot
  // Breakdown of fetch_ns, measured per chunk (no clock read per raw sample):
  uint64_t fetch_cpu_ns = 0;   // CPU time of the fetch threads while fetching (thread clock);
                               // fetch_ns - fetch_cpu_ns is time off the CPU (page faults
                               // waiting for storage, or preemption)
  uint64_t decompress_ns = 0;  // time in zstd decompression (timed per zstd record)
  uint64_t zstd_records = 0;   // records that were zstd-decompressed
  uint64_t augment_ns = 0;     // time in crop/flip, estimated from every 8th sample
  uint64_t chunks = 0;         // chunks (pieces of a batch) filled
  // Read-ahead (LoaderOptions::read_ahead_bytes):
  uint64_t read_ahead_samples = 0;           // samples whose stored bytes were advised
  uint64_t read_ahead_bytes = 0;             // bytes advised (the samples' stored bytes)
  uint64_t read_ahead_ns = 0;                // time fetch threads spent issuing advice and probes
  uint64_t read_ahead_max_lead_samples = 0;  // the most samples a window extension reached past
                                             // the start of the chunk being claimed
  uint64_t residency_probes = 0;             // upcoming samples checked for residency (mincore)
  uint64_t residency_misses = 0;             // of which not resident
  // Direct reads (io_path() kDirect):
  uint64_t direct_reads = 0;          // reads completed
  uint64_t direct_read_bytes = 0;     // bytes they read (aligned covering ranges)
  uint64_t direct_max_in_flight = 0;  // the most reads one thread had in flight
  // Remote reads (io_path() kRemote): the range GETs behind them, retries, failures, body bytes
  // and per-attempt latency (RequestStats, reader/range_reader.h), all fetch threads summed; a
  // mixture's: those of its sources at a URL (as of each source's last completed read).
  RequestStats requests;
  // The local cache of a dataset at a URL (LoaderOptions::remote_cache_dir), not counters: its
  // pieces held now (stored by any process sharing the directory) of the dataset's pieces, and
  // whether this process's fill has ended (every piece held, the directory full, another
  // process filling, or an error: remote_cache_fill_error, "" otherwise). All zero without one.
  uint64_t remote_cache_pieces_held = 0;
  uint64_t remote_cache_pieces_total = 0;
  bool remote_cache_fill_done = false;
  std::string remote_cache_fill_error;
  // Device batches (LoaderOptions::device >= 0), counted on the consumer thread:
  uint64_t uploads = 0;         // host-to-device uploads issued (data + labels of one batch)
  uint64_t upload_bytes = 0;    // sample bytes in them
  uint64_t upload_wait_ns = 0;  // host time waiting for copies to complete before a host slot
                                // went back to the fetch threads: the copy time not hidden
  // Not counters: the snapshot's epoch (Loader::epoch()) and io path (Loader::io_path()).
  uint64_t epoch = 0;
  IoMode io_path = IoMode::kMmap;

  // Time of the fetch threads off the CPU while fetching: fetch_ns - fetch_cpu_ns (0 if less).
  uint64_t storage_ns() const { return fetch_ns > fetch_cpu_ns ? fetch_ns - fetch_cpu_ns : 0; }
  // CPU time fetching that was neither decompression nor augmentation: record checks, decoding
  // and the copy into the batch slot; fetch_cpu_ns - decompress_ns - augment_ns (0 if less:
  // decompress and augment are wall-clock times, augment an estimate).
  uint64_t copy_ns() const {
    const uint64_t other = decompress_ns + augment_ns;
    return fetch_cpu_ns > other ? fetch_cpu_ns - other : 0;
  }
};

class Loader {
 public:
  // Builds a loader over `dataset` (shared: the loader keeps it alive), allocates its slots and
  // starts its threads, which begin filling epoch options.start_epoch at once. A dataset that
  // is one part of a partitioned pack (`kiln pack --part I --of N`, not yet merged) is read as
  // it is, with one warning on stderr naming the part: it holds only that part's samples.
  // Errors: InvalidArgument for out-of-range options (naming the option; also a `device` index
  // at or above the device count when devices exist); OutOfRange when slot memory (host or
  // device) cannot be allocated; CudaStatus errors naming the CUDA call for device batches.
  static Result<std::unique_ptr<Loader>> Create(std::shared_ptr<const Dataset> dataset,
                                                const LoaderOptions& options);
  // Opens the dataset in `dir` (Dataset::Open) and builds a loader over it.
  static Result<std::unique_ptr<Loader>> Open(const std::string& dir, const LoaderOptions& options);
  // Builds a loader over a mixture of `datasets` (reader/mixture.md): each epoch draws
  // mixture.samples_per_epoch samples, in the proportions mixture.weights (or repeats) give, in a
  // smooth interleaved order that is a pure function of (seed, epoch, position). Everything the
  // loader guarantees for one dataset holds for the mixture's N global positions (byte-identical
  // batches whatever num_threads, prefetch and io path; every rank the same number of batches;
  // state() and resume, also on another world size); Batch::sources names each sample's dataset
  // and Batch::sample_indices its index there; labels are each dataset's own. The datasets stay
  // alive while the loader lives. Errors: as Create, and InvalidArgument for datasets whose
  // sample schemas differ (naming both datasets and the field: dtype, layout or shape), weights
  // or repeats whose count differs from the datasets' or that are not all > 0 and finite, both
  // or neither given, more than kMaxMixtureSources datasets, or shuffle kBlock (a mixture reads
  // in exact or none order). A mixture of one dataset is a mixture (its state is version 2).
  static Result<std::unique_ptr<Loader>> CreateMixture(
      std::vector<std::shared_ptr<const Dataset>> datasets, const MixtureOptions& mixture,
      const LoaderOptions& options);
  // Opens each of `dirs` (Dataset::Open; URLs too) and calls CreateMixture.
  static Result<std::unique_ptr<Loader>> OpenMixture(const std::vector<std::string>& dirs,
                                                     const MixtureOptions& mixture,
                                                     const LoaderOptions& options);
  // Create with device batches on `ops` instead of the CUDA runtime (options.device >= 0 is
  // then used as given, with no device check): for tests of the upload protocol on a simulated
  // device (tests/reader/device_protocol_test.cc). `ops` null is Create.
  static Result<std::unique_ptr<Loader>> CreateWithDeviceOps(std::shared_ptr<const Dataset> dataset,
                                                             const LoaderOptions& options,
                                                             std::shared_ptr<DeviceOps> ops);

  // Stops and joins the fetch threads. Blocks until in-flight reads finish (microseconds).
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Makes `epoch` the one Next() serves from its first batch, abandoning the current epoch. A
  // call for the epoch already about to start is free (its prefetched batches are kept).
  void SetEpoch(uint64_t epoch);

  // Starts a pass over an epoch (one `for` loop of kiln.Loader) and returns its number: the
  // current epoch when none of its batches has been served yet (a new loader, after SetEpoch,
  // or a resumed epoch, which keeps its position), otherwise the next one from its first batch
  // (abandoning the rest of the current epoch, or after its end). This is the loader's one
  // epoch counter: kiln.Loader keeps none of its own.
  uint64_t BeginEpoch();
  // True when the next Next() serves the first batch the current epoch serves (its start, or a
  // resumed position): no batch of it has been served since it was started.
  bool at_epoch_start() const;

  // Waits for the next batch of the current epoch and points `*batch` at it (releasing the
  // previous batch). Returns true with a batch, false at the end of the epoch; the call after
  // the end starts epoch + 1. Errors: the stored failure of a fetch thread for this batch
  // (Corruption naming file, record and offset; IOError; OutOfRange for memory it could not
  // allocate); NotSupported in a process forked after Create() ("Processes" in reader/loader.md).
  // `*batch` is untouched by an error of CheckProcess().
  Result<bool> Next(Batch* batch);

  // Next(), but while it waits for the batch it calls `interrupted` every `poll_ms` (on this
  // thread, without the loader's mutex held) and, when that returns true, returns Cancelled
  // ("interrupted while waiting for batch B of epoch E") without serving a batch: the previous
  // batch is released and the next call waits for batch B again. For a consumer that must react
  // to Ctrl-C while a batch is slow to come (kiln.Loader runs Python's signal handlers there).
  // `poll_ms`: default 100, at least 1.
  Result<bool> Next(Batch* batch, const std::function<bool()>& interrupted, uint32_t poll_ms = 100);

  // Releases the batch the consumer holds now, as the next Next() would (steps 2 and 3 of the
  // protocol in reader/loader.md): its pointers become invalid, and its `released` events are
  // recorded on the streams given to WaitOn. Call it before destroying a stream passed to WaitOn
  // while the loader still holds that batch. No-op when nothing is held.
  void Release();

  // Returns the position of the batch the next Next() serves: the current epoch and the
  // global samples consumed by the batches Next() has returned in it (the batch held counts as
  // consumed), or (epoch + 1, 0) once Next() has returned false at the end of an epoch.
  // Save it after the training step that used the last batch. O(1).
  ReaderState state() const;

  // Returns OK in the process that created the loader, NotSupported (the message of Next() in a
  // forked child) in any other. O(1): one getpid().
  Status CheckProcess() const;

  uint64_t epoch() const;
  // Batches of a whole epoch (the same on every rank); a resumed epoch serves
  // batches_per_epoch() - Sampler::first_step() when its position is a whole number of steps.
  uint64_t batches_per_epoch() const { return sampler_.batches_per_epoch(); }
  // Batches the current epoch serves from where it started (batches_per_epoch() unless resumed).
  uint64_t batches_in_epoch() const;
  uint64_t samples_per_epoch() const { return sampler_.samples_per_epoch(); }
  // The mixture's schedule (quotas, sizes), or null for a loader over one dataset.
  const MixtureSchedule* mixture() const { return mixture_.get(); }
  const TensorSchema& sample_schema() const { return out_schema_; }
  bool pinned() const { return buffer_->pinned(); }
  // True when batches are uploaded to options().device (false after a fallback).
  bool device_batches() const { return device_ != nullptr; }
  uint32_t num_threads() const { return static_cast<uint32_t>(threads_.size()); }
  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return options_; }
  // A snapshot of the counters. Thread safety: callable from any thread while the loader
  // works (the statistics export calls it from its own thread): the counters are added under
  // the loader's mutex, once per chunk by the fetch threads and once per batch by Next(), and
  // copied under it here (a few hundred bytes; no I/O under the lock); the device upload
  // counters are relaxed atomics. In a forked child, reads the copy without the lock.
  LoaderStats stats() const;
  // The statistics export (LoaderOptions::stats_dir, KILN_STATS_DIR), or null when off.
  const StatsExporter* stats_exporter() const { return exporter_.get(); }
  // The path the fetch threads read with: kMmap, kDirect or kRemote (never kAuto), and why it was
  // chosen ("dataset of 2163 MB > half the memory limit of 512 MiB", "io_uring_queue_init:
  // Operation not permitted", ...).
  // A mixture with a source at a URL is kRemote too (io_reason() names those sources; its local
  // sources are read through their mappings).
  IoMode io_path() const {
    return remote_ || !store_reads_.empty() ? IoMode::kRemote
           : direct_files_ != nullptr       ? IoMode::kDirect
                                            : IoMode::kMmap;
  }
  const std::string& io_reason() const { return io_reason_; }
  // Block order on the mmap path: the memory its window needs against the memory limit
  // (BlockMemoryFit; Create prints BlockMemoryFitWarning once when it does not fit). nullopt in
  // other orders and on the direct path.
  const std::optional<BlockMemoryFit>& block_memory_fit() const { return block_memory_fit_; }
  // Reads each thread keeps in flight on the direct path (0 on the mmap path).
  uint32_t direct_depth() const { return direct_depth_; }

 private:
  struct Slot {
    uint64_t batch = UINT64_MAX;  // batch number it holds or is being filled with
    uint32_t pending = 0;         // chunks not yet finished
    uint32_t size = 0;
    Status status;  // first failure among its chunks
    uint8_t* data = nullptr;
    int64_t* labels = nullptr;
    std::vector<uint64_t> indices;
    std::vector<uint8_t> is_padding;
    // A mixture: each sample's source and index within it, filled from `indices` by the fetch
    // threads of the mapped path (FillChunk) or, on the direct path, by Next().
    std::vector<uint32_t> sources;
    std::vector<uint64_t> source_indices;
  };

  Loader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options, Sampler sampler,
         TensorSchema out_schema);
  // The batch slots' sizes, fixed at Create.
  struct SlotLayout {
    uint64_t samples = 1;      // samples a slot holds
    uint64_t data_bytes = 0;   // sample bytes, rounded up to 4096; the labels follow
    uint64_t label_bytes = 0;  // int64 labels, rounded up to 4096
    size_t count = 0;          // prefetch + 1
    uint64_t slot_bytes() const { return data_bytes + label_bytes; }
  };
  // The steps of Create, in order: the host slots (buffer_, slots_); the device ring (device_,
  // for options.device >= 0 and a usable device or `ops`); the chunking and the io path
  // (ChooseIoPath, the block memory fit, the read-ahead window); the fetch threads.
  Result<SlotLayout> AllocateSlots();
  Status SetUpDevice(std::shared_ptr<DeviceOps> ops, const SlotLayout& layout);
  Status SetUpIo(uint32_t threads, const SlotLayout& layout);
  Status StartThreads(uint32_t threads);
  // Starts `epoch` after `consumed` global positions (validated by the caller).
  void StartEpochLocked(uint64_t epoch, std::unique_lock<std::mutex>& lock, uint64_t consumed = 0);
  // Create's body; `mixture` null for one dataset.
  static Result<std::unique_ptr<Loader>> CreateImpl(std::shared_ptr<const Dataset> dataset,
                                                    const LoaderOptions& options,
                                                    std::shared_ptr<DeviceOps> ops,
                                                    std::shared_ptr<const MixtureSchedule> mixture);
  // The mixture's part of CheckResume: the same sources, sizes and quotas.
  Status CheckResumeMixture(const ReaderState& state, const std::string& what) const;
  // Returns the `consumed` to start the state's epoch with, or why it cannot be honoured.
  Result<uint64_t> CheckResume(const ReaderState& state) const;
  // Its parts, each returning the error CheckResume returns, prefixed with `what`: the order
  // (sampler version, dataset, start epoch, seed, shuffle mode, blocks); the augmentation; and
  // the position of a kBlock state.
  Status CheckResumeOrder(const ReaderState& state, const std::string& what) const;
  Status CheckResumeAugment(const ReaderState& state, const std::string& what) const;
  Result<uint64_t> ResumeBlockPosition(const ReaderState& state, const std::string& what) const;
  void WorkerLoop(RangeReader* reader);  // reader: this thread's, null on the mmap path
  Status FillChunk(Slot& slot, uint64_t batch, uint32_t chunk, RecordDecoder* decoder,
                   std::vector<uint8_t>* scratch, uint64_t* augment_ns);
  // JPEG records (Dataset::jpeg_records): a fetch thread's decoder of them, which decodes,
  // crops and resizes each record straight into its slot; null for other datasets.
  std::unique_ptr<JpegSampleDecoder> MakeJpegDecoder() const;
  // Tells `decoder`'s JPEG decoder (if any) which sample of the current epoch it decodes next.
  void NameSample(RecordDecoder* decoder, uint64_t index) const {
    if (ImageRecordDecoder* d = decoder->image_decoder()) {
      static_cast<JpegSampleDecoder*>(d)->SetSample(sampler_.epoch(), index);
    }
  }
  // Crops and flips sample k of `slot`, decoded (stored schema) at `decoded`, into its place.
  void AugmentIntoSlot(Slot& slot, uint32_t k, const uint8_t* decoded, uint64_t* augment_ns) const;
  // Task claiming, shared by both worker loops; all three require mu_ held.
  bool TaskClaimableLocked() const;
  // Claims the next task (batch, chunk) and, for chunk 0, prepares its slot. Requires
  // TaskClaimableLocked(). The caller increments busy_.
  void ClaimTaskLocked(uint64_t* batch, uint32_t* chunk);
  // Records a filled chunk: its status, the slot's pending count, busy_, and wakes waiters.
  void FinishTaskLocked(Slot& slot, Status status);
  // The direct path's worker (reader/direct_reader.h): keeps its queue full across chunks by
  // claiming the next chunk while the reads of the current one are finishing. Its state and steps
  // are a DirectWorker (reader/loader_direct.cc).
  void DirectWorkerLoop(RangeReader* reader);
  class DirectWorker;
  // Chooses the io path (options_.io) and sets up direct_files_ and range_readers_.
  Status ChooseIoPath(uint32_t threads);
  // The io path of a dataset opened from a URL (dataset_->file_store() set): one remote
  // RangeReader per fetch thread.
  // Errors: the local cache's (remote_cache_dir) when it cannot be opened.
  Status ChooseRemotePath(uint32_t threads);
  // Writes the dataset indices at this rank's epoch positions [begin, end) to `indices`.
  void PositionIndices(uint64_t begin, uint64_t end, std::vector<uint64_t>* indices,
                       std::vector<uint8_t>* padding) const;
  // Read-ahead. ProbeAhead checks up to 4 samples of the extension [begin, end) (positions;
  // kBlock: dealt blocks) for residency; AdviseAhead advises samples `indices`, extending `*run`
  // (the run of neighbouring records not yet advised) and adding to `*result`; false when the
  // mapping faulted (advice stops there).
  struct ReadAheadResult {
    uint64_t samples = 0, bytes = 0;
    bool probed = false, missed = false;
  };
  ReadAheadResult ProbeAhead(uint64_t begin, uint64_t end) const;
  bool AdviseAhead(const std::vector<uint64_t>& indices, MappedRange* run,
                   ReadAheadResult* result) const;
  // Moves the read-ahead frontier past chunk `chunk` of batch `batch` (requires mu_) and sets
  // [*begin, *end) to what it added, for the caller to advise; leaves them alone when nothing
  // was added (the window covers it already, or read-ahead is off).
  void ExtendReadAheadLocked(uint64_t batch, uint32_t chunk, uint64_t* begin, uint64_t* end);
  // Probes the extension [begin, end) and, once reads reach storage, advises its samples;
  // `indices` and `padding` are the calling worker's scratch. Runs without mu_.
  ReadAheadResult ReadAhead(uint64_t begin, uint64_t end, std::vector<uint64_t>* indices,
                            std::vector<uint8_t>* padding);
  // Issues batch `batch`'s upload (step 1) from host slot `slot_index`, on the consumer thread.
  Status UploadSlot(size_t slot_index, uint64_t batch, uint32_t size);
  // Releases the held batch: the device slot, then the host slot (takes mu_ briefly).
  void ReleaseHeld();
  // Makes the ring's device current for the scope (none for host batches).
  Result<std::unique_ptr<DeviceOps::Scope>> EnterDevice();

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  Sampler sampler_;  // permutation rewritten only by StartEpochLocked with no worker busy
  TensorSchema out_schema_;
  uint64_t dataset_fingerprint_ = 0;  // manifest checksum (ReaderState::dataset_fingerprint)
  // A mixture: its schedule and each source's manifest checksum; null and empty otherwise.
  std::shared_ptr<const MixtureSchedule> mixture_;
  std::vector<uint64_t> source_fingerprints_;
  uint32_t chunks_per_batch_ = 1;
  uint32_t chunk_samples_ = 1;
  std::unique_ptr<HostBuffer> buffer_;
  std::unique_ptr<DeviceRing> device_;  // null for host batches; the consumer thread's
  std::vector<Slot> slots_;
  std::vector<std::thread> threads_;
  // Direct path: the data files opened for direct reads and one reader per fetch thread; null
  // and empty on the mmap path. Set by Create() before the threads start.
  std::unique_ptr<DirectFiles> direct_files_;
  std::vector<std::unique_ptr<RangeReader>> range_readers_;  // one per fetch thread, or none
  bool remote_ = false;  // range_readers_ read a dataset at a URL
  // Datasets at a URL whose records are read one at a time through their store's ReadRange
  // (a mixture's sources at a URL; a dataset at a URL whose range readers could not start),
  // each with its ReadRange counters at the loader's start: stats() adds what they counted
  // since into LoaderStats::requests. Empty otherwise; set before the threads start.
  struct StoreReads {
    const remote::RemoteStore* store;  // owned by dataset_ (a source's file_store())
    RequestStats start;
  };
  std::vector<StoreReads> store_reads_;
  // The local cache of a dataset at a URL (remote_cache_dir), filling; null without one.
  std::shared_ptr<remote::DiskCache> disk_cache_;
  // `failed`, a record's decode error (a checksum mismatch), when its bytes at `loc` came from
  // the local cache: those pieces are dropped from it (read from the network next time) and the
  // message names the cache file; else `failed` as it is.
  Status DamagedInLocalCache(const Dataset::StoredLocation& loc, Status failed) const;
  // At a URL, whole extents of consecutive samples read with one GET each, shared by the fetch
  // threads through a BlockCache (reader/remote/block_cache.h): the direct workers pass each
  // record's extent (QueueWithin). Block order: the sampler's blocks (extent_samples_ =
  // block_samples, nothing read ahead). Dataset order on one or two ranks, when the open's
  // round trip was at least RemoteOptions::extents_from_us: runs of block_bytes, with the next
  // extent_ahead_ extents fetched ahead (RangeReader::Prefetch), so the GETs overlap the
  // network's round trip instead of waiting for it. 0: records are read one GET each (or
  // merged per chunk).
  uint64_t extent_samples_ = 0;
  uint32_t extent_ahead_ = 0;
  // Warns once when a dataset at a URL is read faster than its server is known to allow
  // (remote::RequestRateWarning), measured over intervals of at least 2 s. Requires mu_ held.
  void CheckRequestRateLocked(uint64_t now_ns);
  uint64_t rate_mark_ns_ = 0, rate_mark_requests_ = 0;
  bool rate_warned_ = false;
  uint32_t direct_depth_ = 0;
  std::string io_reason_;
  std::optional<BlockMemoryFit> block_memory_fit_;

  // Synchronisation, on the heap so that a forked child's destructor can leave it alone: the
  // copy's mutex may be locked and its condition variables may count waiters that do not
  // exist in the child (pthread_cond_destroy would wait for them forever).
  struct Sync {
    std::mutex mu;
    std::condition_variable work_cv;   // workers: a task became claimable, or stop
    std::condition_variable ready_cv;  // consumer: a batch finished
    std::condition_variable idle_cv;   // epoch switch: the last busy worker finished
  };
  const pid_t owner_pid_;  // the process that created the loader and its threads
  // True in a process other than owner_pid_ (a forked child).
  bool Forked() const;
  std::unique_ptr<Sync> sync_ = std::make_unique<Sync>();
  std::mutex& mu_ = sync_->mu;
  std::condition_variable& work_cv_ = sync_->work_cv;
  std::condition_variable& ready_cv_ = sync_->ready_cv;
  std::condition_variable& idle_cv_ = sync_->idle_cv;
  uint64_t epoch_ = 0;          // guarded by mu_
  bool epoch_started_ = false;  // guarded by mu_: tasks of epoch_ are being handed out
  FetchSchedule schedule_;      // guarded by mu_: the tasks claimed, the batches released
  uint64_t next_batch_ = 0;     // guarded by mu_: the batch Next() returns next
  bool holding_ = false;        // guarded by mu_: the consumer holds batch next_batch_ - 1
  uint32_t busy_ = 0;           // guarded by mu_: workers filling a chunk
  uint64_t read_ahead_samples_window_ = 0;  // read_ahead_bytes in samples; 0 = off
  uint64_t epoch_positions_ = 0;   // guarded by mu_: samples of this rank's epoch, in order
  uint64_t read_ahead_until_ = 0;  // guarded by mu_: positions (kBlock: this rank's dealt
                                   // blocks) [0, it) handed out for advice
  // Bit k set: the k-th latest residency probe missed. Atomic: a probe is recorded at
  // once, so threads claiming at the same time see it.
  mutable std::atomic<uint64_t> miss_history_{0};
  std::once_flag access_advised_;  // the dataset's mappings got their access advice
  bool stop_ = false;              // guarded by mu_
  LoaderStats stats_;              // guarded by mu_
  // The statistics export; started last by Create, finished first by the destructor after the
  // fetch threads are joined (its final line then equals stats()). Null when off.
  std::unique_ptr<StatsExporter> exporter_;
};

}  // namespace kiln

#endif  // KILN_READER_LOADER_H_
