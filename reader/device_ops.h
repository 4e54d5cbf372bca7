// kiln::DeviceOps: the CUDA calls the loader's device ring makes (reader/loader.h, "Device
// batches"), behind one interface, so the slot protocol (upload, release, epoch switch,
// destruction, a half-failed upload) runs unchanged on a simulated device in the tests
// (tests/reader/device_protocol_test.cc drives it on a CPU machine; gpu_upload_test runs the same
// code on the CUDA implementation, CudaDeviceOps()).
//
// Handles are the CUDA runtime's (cudaStream_t, cudaEvent_t, device pointers); a simulation may
// hand out any distinct non-null values. Every call returns a Status naming the CUDA call;
// nothing throws. Thread safety: the loader calls one DeviceOps from its consumer thread (and
// its destructor); implementations need no locking of their own for that use.
#ifndef KILN_READER_DEVICE_OPS_H_
#define KILN_READER_DEVICE_OPS_H_

#include <cstddef>
#include <memory>

#include "formats/status.h"
#include "reader/cuda_handles.h"

namespace kiln {

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;

  // Makes `device` current on the calling thread until the returned scope is destroyed (see
  // CudaDeviceGuard). Errors: those of cudaGetDevice/cudaSetDevice.
  class Scope {
   public:
    virtual ~Scope() = default;
  };
  virtual Result<std::unique_ptr<Scope>> EnterDevice(int device) = 0;

  // A non-blocking stream on the current device; its destruction.
  virtual Result<cudaStream_t> CreateStream() = 0;
  virtual void DestroyStream(cudaStream_t stream) = 0;
  // An event without timing on the current device; its destruction.
  virtual Result<cudaEvent_t> CreateEvent() = 0;
  virtual void DestroyEvent(cudaEvent_t event) = 0;
  // `bytes` of device memory on the current device (OutOfRange when it is short); its release.
  virtual Result<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* device_memory) = 0;

  // cudaMemcpyAsync host -> device on `stream`.
  virtual Status CopyToDevice(void* dst, const void* src, size_t bytes, cudaStream_t stream) = 0;
  // cudaEventRecord(event, stream); stream nullptr is the legacy default stream.
  virtual Status Record(cudaEvent_t event, cudaStream_t stream) = 0;
  // cudaStreamWaitEvent(stream, event): later work on `stream` waits for what `event` captured.
  virtual Status StreamWaitEvent(cudaStream_t stream, cudaEvent_t event) = 0;
  // cudaEventSynchronize: blocks the host until what `event` captured has completed.
  virtual Status EventSynchronize(cudaEvent_t event) = 0;
  // cudaStreamSynchronize: blocks the host until all work on `stream` has completed.
  virtual Status StreamSynchronize(cudaStream_t stream) = 0;
};

// The CUDA runtime's implementation (one shared instance; stateless). In a build without the
// CUDA runtime every call returns NotSupported.
std::shared_ptr<DeviceOps> CudaDeviceOps();

}  // namespace kiln

#endif  // KILN_READER_DEVICE_OPS_H_
