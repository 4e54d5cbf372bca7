// kiln::Loader: streams shuffled batches of a packed dataset into a fixed ring of host batch
// slots with a pool of fetch threads.
//
//   dataset (mapped) -> sampler (seed, epoch, rank) -> fetch threads -> batch slots -> Next()
//
// A Loader owns `num_threads` fetch threads (persistent across epochs) and `prefetch + 1` batch
// slots allocated once at Create(): pinned memory when a CUDA device is present and pin_memory
// is set, page-aligned host memory otherwise. Each sample's bytes are copied once, from the
// mapping (or the zstd decoder) into its slot. Fetch threads fill up to `prefetch` batches ahead
// of the one the consumer holds.
//
// Guarantees: batches arrive in sampler order; an epoch's batches are byte-identical whatever
// num_threads and prefetch are; the order depends only on (seed, epoch); every rank gets
// batches_per_epoch() batches (see TailPolicy in reader/sampler.h).
//
// Errors: a fetch thread's failure (a corrupt record, say) is stored with its batch and returned
// by the Next() call that reaches that batch, naming file, record and offset. The next call
// continues with the following batch.
//
// Thread safety: one consumer thread calls SetEpoch/Next; the fetch threads are internal.
// Lifetimes: a Batch's pointers stay valid until the next call to Next() or SetEpoch(), or the
// Loader's destruction, whichever comes first. Copy what you keep.
#ifndef KILN_READER_LOADER_H_
#define KILN_READER_LOADER_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "formats/dataset.h"
#include "formats/shard_format.h"
#include "formats/status.h"
#include "reader/augmenter.h"
#include "reader/host_buffer.h"
#include "reader/sampler.h"

namespace kiln {

struct LoaderOptions {
  uint32_t batch_size = 256;     // samples per batch, >= 1. Default 256.
  bool shuffle = true;           // a new permutation every epoch. Default true.
  uint64_t seed = 0;             // permutation and augmentation seed. Default 0.
  bool drop_last = false;        // drop each rank's last partial batch. Default false.
  TailPolicy tail_policy = TailPolicy::kShort;  // uneven rank shares; see sampler.h.
  uint32_t rank = 0;             // this process's rank, in [0, world_size). Default 0.
  uint32_t world_size = 1;       // ranks reading the dataset together. Default 1.
  uint32_t num_threads = 0;      // fetch threads; 0 = the machine's hardware threads. Max 256.
  uint32_t prefetch = 2;         // batches filled ahead of the consumer, [1, 64]. Default 2.
  bool pin_memory = true;        // pinned slots when a CUDA device is present. Default true.
  AugmentOptions augment;        // random crop and flip. Default off.
  uint64_t start_epoch = 0;      // the epoch the first Next() serves (resume). Default 0.
};

// One batch: `size` samples in one contiguous block, sample k at data + k * sample_bytes.
struct Batch {
  uint64_t epoch = 0;
  uint64_t index = 0;        // position in the epoch, from 0
  uint32_t size = 0;         // samples; batch_size except a last partial (or empty) batch
  TensorSchema schema;       // of each sample (after any crop)
  const uint8_t* data = nullptr;              // [size, schema shape], schema dtype, LE
  const int64_t* labels = nullptr;            // [size]
  const uint64_t* sample_indices = nullptr;   // [size] dataset indices
  const uint8_t* is_padding = nullptr;        // [size] 1 for padding (TailPolicy::kPad)
  bool pinned = false;                        // data lives in pinned memory
  uint64_t bytes() const { return uint64_t{size} * schema.sample_bytes(); }
};

// Cumulative counters since Create(), for `kiln bench`.
struct LoaderStats {
  uint64_t batches = 0;          // batches returned by Next()
  uint64_t samples = 0;          // samples in them
  uint64_t bytes = 0;            // sample bytes in them
  uint64_t consumer_wait_ns = 0; // time Next() spent waiting for a batch to be filled
  uint64_t fetch_ns = 0;         // time fetch threads spent reading samples (all threads)
  uint64_t slot_wait_ns = 0;     // time fetch threads spent waiting for a free slot
  // Breakdown of fetch_ns, measured per chunk (no clock read per raw sample):
  uint64_t fetch_cpu_ns = 0;     // CPU time of the fetch threads while fetching (thread clock);
                                 // fetch_ns - fetch_cpu_ns is time off the CPU (page faults
                                 // waiting for storage, or preemption)
  uint64_t decompress_ns = 0;    // time in zstd decompression (timed per zstd record)
  uint64_t zstd_records = 0;     // records that were zstd-decompressed
  uint64_t augment_ns = 0;       // time in crop/flip, estimated from every 8th sample
  uint64_t chunks = 0;           // chunks (pieces of a batch) filled
};

class Loader {
 public:
  // Builds a loader over `dataset` (shared: the loader keeps it alive), allocates its slots and
  // starts its threads, which begin filling epoch options.start_epoch at once.
  // Errors: InvalidArgument for out-of-range options (naming the option); OutOfRange when slot
  // memory cannot be allocated.
  static Result<std::unique_ptr<Loader>> Create(std::shared_ptr<const Dataset> dataset,
                                                const LoaderOptions& options);
  // Opens the dataset in `dir` (Dataset::Open) and builds a loader over it.
  static Result<std::unique_ptr<Loader>> Open(const std::string& dir,
                                              const LoaderOptions& options);

  // Stops and joins the fetch threads. Blocks until in-flight reads finish (microseconds).
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Makes `epoch` the one Next() serves from its first batch, abandoning the current epoch. A
  // call for the epoch already about to start is free (its prefetched batches are kept).
  void SetEpoch(uint64_t epoch);

  // Waits for the next batch of the current epoch and points `*batch` at it (releasing the
  // previous batch). Returns true with a batch, false at the end of the epoch; the call after
  // the end starts epoch + 1. Errors: the stored failure of a fetch thread for this batch
  // (Corruption naming file, record and offset; IOError).
  Result<bool> Next(Batch* batch);

  uint64_t epoch() const;
  uint64_t batches_per_epoch() const { return sampler_.batches_per_epoch(); }
  uint64_t samples_per_epoch() const { return sampler_.samples_per_epoch(); }
  const TensorSchema& sample_schema() const { return out_schema_; }
  bool pinned() const { return buffer_->pinned(); }
  uint32_t num_threads() const { return static_cast<uint32_t>(threads_.size()); }
  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return options_; }
  LoaderStats stats() const;

 private:
  struct Slot {
    uint64_t batch = UINT64_MAX;  // batch number it holds or is being filled with
    uint32_t pending = 0;         // chunks not yet finished
    uint32_t size = 0;
    Status status;                // first failure among its chunks
    uint8_t* data = nullptr;
    int64_t* labels = nullptr;
    std::vector<uint64_t> indices;
    std::vector<uint8_t> is_padding;
  };

  Loader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options, Sampler sampler,
         TensorSchema out_schema);
  void StartEpochLocked(uint64_t epoch, std::unique_lock<std::mutex>& lock);
  void WorkerLoop();
  Status FillChunk(Slot& slot, uint64_t batch, uint32_t chunk, RecordDecoder* decoder,
                   std::vector<uint8_t>* scratch, uint64_t* augment_ns);

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  Sampler sampler_;  // permutation rewritten only by StartEpochLocked with no worker busy
  TensorSchema out_schema_;
  uint32_t chunks_per_batch_ = 1;
  uint32_t chunk_samples_ = 1;
  std::unique_ptr<HostBuffer> buffer_;
  std::vector<Slot> slots_;
  std::vector<std::thread> threads_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // workers: a task became claimable, or stop
  std::condition_variable ready_cv_;  // consumer: a batch finished
  std::condition_variable idle_cv_;   // epoch switch: the last busy worker finished
  uint64_t epoch_ = 0;          // guarded by mu_
  bool epoch_started_ = false;  // guarded by mu_: tasks of epoch_ are being handed out
  uint64_t next_task_ = 0;      // guarded by mu_
  uint64_t total_tasks_ = 0;    // guarded by mu_
  uint64_t released_ = 0;       // guarded by mu_: batches the consumer has released
  uint64_t next_batch_ = 0;     // guarded by mu_: the batch Next() returns next
  bool holding_ = false;        // guarded by mu_: the consumer holds batch next_batch_ - 1
  uint32_t busy_ = 0;           // guarded by mu_: workers filling a chunk
  bool stop_ = false;           // guarded by mu_
  LoaderStats stats_;           // guarded by mu_
};

}  // namespace kiln

#endif  // KILN_READER_LOADER_H_
