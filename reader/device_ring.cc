#include "reader/device_ring.h"

#include <algorithm>
#include <string>
#include <utility>

#include "reader/loader.h"
#include "reader/loader_clock.h"

namespace kiln {

Result<std::unique_ptr<DeviceRing>> DeviceRing::Create(std::shared_ptr<DeviceOps> ops, int device,
                                                       size_t slots, uint64_t data_bytes,
                                                       uint64_t label_bytes) {
  std::unique_ptr<DeviceRing> ring(new DeviceRing());
  ring->ops_ = std::move(ops);
  ring->device_ = device;
  ring->data_bytes_ = data_bytes;
  ring->slots_.resize(slots);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<DeviceOps::Scope> scope, ring->ops_->EnterDevice(device));
  Status status = [&]() -> Status {
    KILN_ASSIGN_OR_RETURN(ring->stream_, ring->ops_->CreateStream());
    for (SlotState& st : ring->slots_) {
      st.ops = ring->ops_.get();
      st.device = device;
      KILN_ASSIGN_OR_RETURN(st.memory, ring->ops_->Allocate(data_bytes + label_bytes));
      KILN_ASSIGN_OR_RETURN(st.copied, ring->ops_->CreateEvent());
      for (cudaEvent_t& e : st.released) {
        KILN_ASSIGN_OR_RETURN(e, ring->ops_->CreateEvent());
      }
    }
    return Status::Ok();
  }();
  if (!status.ok()) {
    ring->Destroy();
    return status;
  }
  return ring;
}

DeviceRing::~DeviceRing() {
  // Device memory is freed only after the uploads and the consumer's work on it finished.
  Result<std::unique_ptr<DeviceOps::Scope>> scope = Enter();
  Drain();
  if (stream_ != nullptr) (void)ops_->StreamSynchronize(stream_);
  for (SlotState& st : slots_) {
    for (uint32_t i = 0; i < st.released_count; ++i) (void)ops_->EventSynchronize(st.released[i]);
  }
  Destroy();
}

void DeviceRing::Destroy() {
  for (SlotState& st : slots_) {
    if (st.memory != nullptr) ops_->Free(st.memory);
    if (st.copied != nullptr) ops_->DestroyEvent(st.copied);
    for (cudaEvent_t e : st.released) {
      if (e != nullptr) ops_->DestroyEvent(e);
    }
    st = SlotState{};
  }
  if (stream_ != nullptr) ops_->DestroyStream(stream_);
  stream_ = nullptr;
}

Result<std::unique_ptr<DeviceOps::Scope>> DeviceRing::Enter() const {
  return ops_->EnterDevice(device_);
}

bool DeviceRing::uploaded(size_t slot, uint64_t batch) const {
  return slots_[slot].uploaded_batch == batch;
}

Status DeviceRing::Upload(size_t slot, uint64_t batch, const uint8_t* data, uint64_t data_bytes,
                          const int64_t* labels, uint64_t label_bytes) {
  SlotState& st = slots_[slot];
  DeviceOps& ops = *ops_;
  const std::string what =
      "uploading batch " + std::to_string(batch) + " (slot " + std::to_string(slot) + ")";
  // Step 1: the device buffer's previous batch must be finished with on its consumer streams.
  for (uint32_t i = 0; i < st.released_count; ++i) {
    KILN_RETURN_IF_ERROR(ops.StreamWaitEvent(stream_, st.released[i]).WithContext(what));
  }
  // From the first copy on, the GPU may read the host slot until the copies complete.
  st.copy_pending = true;
  auto* memory = static_cast<uint8_t*>(st.memory);
  Status status = ops.CopyToDevice(memory, data, data_bytes, stream_);
  if (status.ok()) status = ops.CopyToDevice(memory + data_bytes_, labels, label_bytes, stream_);
  if (status.ok()) status = ops.Record(st.copied, stream_);
  if (!status.ok()) {
    // A half-issued upload (the data copy enqueued, then a failure): without a recorded
    // `copied` the release could not wait for it, so wait for the whole stream now, before the
    // host slot can go back to the fetch threads.
    (void)ops.StreamSynchronize(stream_);
    st.copy_pending = false;
    st.uploaded_batch = UINT64_MAX;
    return status.WithContext(what);
  }
  st.uploaded_batch = batch;
  st.consumer_count = 0;
  ++st.generation;
  uploads_.fetch_add(1, std::memory_order_relaxed);
  upload_bytes_.fetch_add(data_bytes, std::memory_order_relaxed);
  return Status::Ok();
}

void DeviceRing::Describe(size_t slot, Batch* batch) {
  SlotState& st = slots_[slot];
  batch->device_data = st.memory;
  batch->device_labels =
      reinterpret_cast<const int64_t*>(static_cast<uint8_t*>(st.memory) + data_bytes_);
  batch->ready_event = st.copied;
  batch->device = device_;
  batch->device_slot_ = &st;
  batch->device_generation_ = st.generation;
}

void DeviceRing::FinishCopy(size_t slot) {
  SlotState& st = slots_[slot];
  if (!st.copy_pending) return;
  const uint64_t start = NowNs();
  Status status = ops_->EventSynchronize(st.copied);
  upload_wait_ns_.fetch_add(NowNs() - start, std::memory_order_relaxed);
  if (!status.ok()) {
    (void)ops_->StreamSynchronize(stream_);
    KeepError(status.WithContext("waiting for the upload of slot " + std::to_string(slot)));
  }
  st.copy_pending = false;
}

void DeviceRing::Release(size_t slot) {
  SlotState& st = slots_[slot];
  if (st.uploaded_batch == UINT64_MAX) {
    FinishCopy(slot);
    return;
  }
  // Step 2: later uploads into this device buffer wait for the consumer's work enqueued so far
  // on every stream that waited on the batch (the legacy default stream when none did).
  const cudaStream_t legacy = nullptr;
  const cudaStream_t* streams = st.consumer_count > 0 ? st.consumers : &legacy;
  const uint32_t n = std::max<uint32_t>(1, st.consumer_count);
  Status status;
  st.released_count = 0;
  for (uint32_t i = 0; i < n; ++i) {
    Status recorded = ops_->Record(st.released[st.released_count], streams[i]);
    if (recorded.ok()) {
      ++st.released_count;
    } else {
      // Without the event, wait for the consumer's stream on the host instead.
      if (status.ok())
        status = recorded.WithContext("releasing batch slot " + std::to_string(slot));
      (void)ops_->StreamSynchronize(streams[i]);
    }
  }
  st.uploaded_batch = UINT64_MAX;
  st.consumer_count = 0;
  // Step 3: the host slot is refilled only after its copy has completed.
  FinishCopy(slot);
  if (!status.ok()) KeepError(std::move(status));
}

void DeviceRing::Drain() {
  for (size_t s = 0; s < slots_.size(); ++s) {
    FinishCopy(s);
    slots_[s].uploaded_batch = UINT64_MAX;
    slots_[s].consumer_count = 0;
  }
}

void DeviceRing::KeepError(Status status) {
  if (error_.ok()) error_ = std::move(status);
}

Status DeviceRing::TakeError() {
  Status error = std::move(error_);
  error_ = Status::Ok();
  return error;
}

// Batch (reader/loader.h) reaches its slot's device state here, where its type is defined.
Status Batch::WaitOn(cudaStream_t consumer_stream) const {
  constexpr uint32_t kMax = DeviceRing::kMaxConsumerStreams;
  auto* state = static_cast<DeviceRing::SlotState*>(device_slot_);
  if (state == nullptr || state->generation != device_generation_ ||
      state->uploaded_batch == UINT64_MAX) {
    return Status::InvalidArgument(
        "Batch::WaitOn: batch " + std::to_string(index) + " of epoch " + std::to_string(epoch) +
        (state == nullptr ? " has no device copy (LoaderOptions::device is -1, the loader fell "
                            "back to host batches, or the batch failed)"
                          : " was already released (by Next, SetEpoch or Release)"));
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<DeviceOps::Scope> scope,
                        state->ops->EnterDevice(state->device));
  for (uint32_t i = 0; i < state->consumer_count; ++i) {
    if (state->consumers[i] == consumer_stream) {
      return state->ops->StreamWaitEvent(consumer_stream, state->copied);
    }
  }
  if (state->consumer_count == kMax) {
    return Status::InvalidArgument(
        "Batch::WaitOn: batch " + std::to_string(index) + " is already read on " +
        std::to_string(kMax) +
        " streams; join the others into one of them (cudaStreamWaitEvent) and pass that one");
  }
  KILN_RETURN_IF_ERROR(state->ops->StreamWaitEvent(consumer_stream, state->copied));
  state->consumers[state->consumer_count++] = consumer_stream;
  return Status::Ok();
}

}  // namespace kiln
