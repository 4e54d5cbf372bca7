// kiln::DeviceRing: the device half of a Loader's batch ring (LoaderOptions::device >= 0): one
// non-blocking upload stream, one device buffer per host batch slot (batch b uses slot
// b % slots), and per slot a `copied` event and up to kMaxConsumerStreams `released` events.
// It runs steps 1 to 3 of the upload protocol (reader/loader.md, "Device batches"): Upload()
// copies a filled host slot to its device buffer after the buffer's previous batch was released
// on the GPU; Release() records the `released` events on the consumer's streams and waits on
// the host for the slot's copy, so the host slot can go back to the fetch threads.
//
// Ownership: the ring owns its stream, events and device memory, and shares `ops` (the CUDA
// runtime, or a simulated device in tests). The host slots are the Loader's; Upload() reads
// them until the copy completes (the next Release()/FinishCopy()/Drain() of that slot).
// Thread safety: none. Only the Loader's consumer thread (Next, SetEpoch, Release,
// Batch::WaitOn) and its destructor call it, never with the loader's mutex held.
// Devices: every call expects the ring's device to be current (Enter()); the destructor makes
// it current itself.
// Errors: Upload() returns its failure (CudaStatus naming the call, with "uploading batch B
// (slot S)"); a failure while releasing or waiting is kept and returned once by TakeError().
#ifndef KILN_READER_DEVICE_RING_H_
#define KILN_READER_DEVICE_RING_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "formats/status.h"
#include "reader/device_ops.h"

namespace kiln {

struct Batch;

class DeviceRing {
 public:
  // Distinct streams Batch::WaitOn accepts per batch.
  static constexpr uint32_t kMaxConsumerStreams = 4;

  // Creates the stream, `slots` device buffers of data_bytes + label_bytes (the labels at offset
  // data_bytes) and their events on `device`. Errors: the first failing DeviceOps call
  // (OutOfRange for memory; CudaStatus); nothing stays allocated then.
  static Result<std::unique_ptr<DeviceRing>> Create(std::shared_ptr<DeviceOps> ops, int device,
                                                    size_t slots, uint64_t data_bytes,
                                                    uint64_t label_bytes);
  // Waits for every copy, for the consumer's work recorded by Release(), and frees the
  // handles, with the ring's device current.
  ~DeviceRing();
  DeviceRing(const DeviceRing&) = delete;
  DeviceRing& operator=(const DeviceRing&) = delete;

  int device() const { return device_; }
  // Makes the ring's device current for the returned scope's lifetime.
  Result<std::unique_ptr<DeviceOps::Scope>> Enter() const;

  // True when batch `batch`'s upload into slot `slot` was issued (this epoch).
  bool uploaded(size_t slot, uint64_t batch) const;
  // Step 1: waits (on the GPU) for the `released` events of the slot's previous batch, copies
  // `data_bytes` of `data` and `label_bytes` of `labels` (host memory that stays untouched until
  // the copy completes) into the slot's device buffer and records `copied`. A half-issued
  // upload synchronises the stream before it returns the error.
  Status Upload(size_t slot, uint64_t batch, const uint8_t* data, uint64_t data_bytes,
                const int64_t* labels, uint64_t label_bytes);
  // Points batch's device fields (device_data, device_labels, ready_event, device, and the
  // WaitOn bookkeeping) at slot `slot`'s upload. Requires uploaded(slot, batch->...).
  void Describe(size_t slot, Batch* batch);
  // Steps 2 and 3 for the batch held in slot `slot`: records its `released` events on the
  // streams given to WaitOn (the legacy default stream when none was), then waits on the host
  // for the slot's copy.
  void Release(size_t slot);
  // Waits on the host for slot `slot`'s copy, when one is pending.
  void FinishCopy(size_t slot);
  // Waits for every pending copy and forgets every upload (before the host slots are reset).
  void Drain();

  // Keeps `status` for TakeError() unless an error is kept already.
  void KeepError(Status status);
  // Returns the kept error (Ok when none) and clears it.
  Status TakeError();

  uint64_t uploads() const { return uploads_.load(std::memory_order_relaxed); }
  uint64_t upload_bytes() const { return upload_bytes_.load(std::memory_order_relaxed); }
  uint64_t upload_wait_ns() const { return upload_wait_ns_.load(std::memory_order_relaxed); }

  // Device state of one slot; Batch::WaitOn reaches it through Batch::device_slot_.
  struct SlotState {
    DeviceOps* ops = nullptr;
    int device = -1;
    void* memory = nullptr;        // data_bytes of samples, then the labels
    cudaEvent_t copied = nullptr;  // recorded on the upload stream after the batch's copies
    // Recorded on each consumer stream when the batch is released; the next upload into this
    // device buffer waits for the first released_count of them.
    cudaEvent_t released[kMaxConsumerStreams] = {};
    uint32_t released_count = 0;
    uint64_t uploaded_batch = UINT64_MAX;  // the batch whose copy was issued (this epoch)
    bool copy_pending = false;  // copies may read the host slot: not yet seen complete on host
    uint64_t generation = 0;    // bumped at every upload; a Batch remembers the one it saw
    cudaStream_t consumers[kMaxConsumerStreams] = {};  // from WaitOn, for the batch now held
    uint32_t consumer_count = 0;
  };

 private:
  DeviceRing() = default;
  // Frees every handle (the device must be current); safe on a half-built ring.
  void Destroy();

  std::shared_ptr<DeviceOps> ops_;
  int device_ = -1;
  uint64_t data_bytes_ = 0;        // offset of the labels in each slot's device memory
  cudaStream_t stream_ = nullptr;  // the upload stream (non-blocking)
  std::vector<SlotState> slots_;
  Status error_;  // a failure at a release, returned by the next Next()
  std::atomic<uint64_t> uploads_{0}, upload_bytes_{0}, upload_wait_ns_{0};
};

}  // namespace kiln

#endif  // KILN_READER_DEVICE_RING_H_
