// kiln CUDA handles: RAII owners of a CUDA stream, an event and a block of device memory, and
// the one place where a cudaError_t becomes a kiln Status.
//
// Every call's return code is checked and turned into a Status naming the call
// ("cudaMemcpyAsync: invalid argument (cudaErrorInvalidValue)"); nothing aborts, nothing is
// swallowed, except in destructors: a destructor ignores cudaErrorCudartUnloading (the runtime
// already shut down at process exit) and every other error, so a handle held by a static or a
// leaked object never crashes the exit path.
//
// Build: the real implementation is compiled when kiln was built with the CUDA runtime
// (KILN_HAVE_CUDA, private to kiln_reader); otherwise every Create/Allocate returns
// NotSupported("kiln was built without the CUDA runtime") and CudaRuntimeAvailable() is false.
// This header never includes the CUDA headers: cudaStream_t and cudaEvent_t are declared here
// exactly as cuda_runtime_api.h declares them, so code built without CUDA still compiles.
//
// Ownership: each handle owns its object and is move-only; a moved-from handle is empty.
// Thread safety: a handle is used by one thread at a time; the CUDA objects themselves follow
// the CUDA runtime's rules (a stream may be used from any thread).
#ifndef KILN_READER_CUDA_HANDLES_H_
#define KILN_READER_CUDA_HANDLES_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/status.h"

// Opaque CUDA runtime handle types, identical to the typedefs in driver_types.h.
struct CUstream_st;
struct CUevent_st;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

namespace kiln {

// Returns true when this build has the CUDA runtime (whether or not a device is present; see
// CudaDeviceAvailable in reader/host_buffer.h for that).
bool CudaRuntimeAvailable();

// Returns OK for cudaSuccess (0), otherwise a Status naming `call` with the runtime's error name
// and description: Internal for most errors, OutOfRange for cudaErrorMemoryAllocation,
// NotSupported for "no device" and "insufficient driver". `error` is a cudaError_t value.
Status CudaStatus(int error, const char* call);

// cudaSetDevice(device). Errors: InvalidArgument naming the device for an index out of range;
// CudaStatus errors otherwise; NotSupported without the CUDA runtime.
Status CudaSetDevice(int device);

// Makes `device` current on the calling thread for the guard's lifetime (cudaGetDevice, then
// cudaSetDevice when it differs) and restores the previous device on destruction, but only when
// the previous device's primary context is active: restoring a device the thread never used
// would create a context on it (cudaSetDevice initialises the primary context since CUDA 12),
// which is how a process meant for GPU N ends up holding memory on GPU 0. Costs about a
// microsecond when the device is already current. status() is the error of the switch
// (CudaStatus("cudaSetDevice")); NotSupported without the CUDA runtime.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  bool changed_ = false;
  Status status_;
};

// True when `device`'s primary context is active in this process (cuDevicePrimaryCtxGetState
// through cudaGetDriverEntryPointByVersion); false without the CUDA runtime or on any error.
bool CudaPrimaryContextActive(int device);

// Describes why the CUDA runtime cannot be used when cudaGetDeviceCount fails or finds nothing:
// "no NVIDIA driver/GPU found (...)" when no driver is loadable (the runtime reports that as
// cudaErrorInsufficientDriver, "CUDA driver version is insufficient", which misleads), the
// driver's and the runtime's CUDA versions when the driver really is too old, else the error.
// Empty when a device is usable.
std::string CudaUnavailableReason();

// OK when `device` is a CUDA device index of this machine: InvalidArgument naming the device
// and the count otherwise; CudaStatus("cudaGetDeviceCount") errors. Creates no context.
Status CudaCheckDevice(int device);

// Orders all future work on `stream` after `event` completes (cudaStreamWaitEvent); no host
// synchronisation. Errors: CudaStatus("cudaStreamWaitEvent").
Status CudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event);

// Blocks the host until all work enqueued on `stream` (nullptr: the legacy default stream) has
// completed. Errors: CudaStatus("cudaStreamSynchronize").
Status CudaStreamSynchronize(cudaStream_t stream);

// Enqueues a host-to-device copy of `bytes` on `stream` (cudaMemcpyAsync). The copy is
// asynchronous only when `src` is pinned; `src` must stay unchanged until the copy completes.
// Errors: CudaStatus("cudaMemcpyAsync").
Status CudaCopyToDeviceAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream);

// Enqueues a device-to-device copy (cudaMemcpyAsync) on `stream`.
// Errors: CudaStatus("cudaMemcpyAsync").
Status CudaCopyDeviceToDeviceAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream);

// Enqueues a device-to-host copy (cudaMemcpyAsync) on `stream`; `dst` is valid after the stream
// is synchronised. Errors: CudaStatus("cudaMemcpyAsync").
Status CudaCopyToHostAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream);

// A CUDA stream created with cudaStreamNonBlocking on a given device: it never synchronises
// implicitly with the legacy default stream, so the loader's copies overlap the training step.
class CudaStream {
 public:
  CudaStream() = default;
  // Creates a non-blocking stream on `device` (made current on the calling thread).
  // Errors: CudaStatus("cudaSetDevice" or "cudaStreamCreateWithFlags"); NotSupported without
  // the CUDA runtime.
  static Result<CudaStream> Create(int device);
  ~CudaStream();
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  // Blocks until all work enqueued on the stream so far has completed.
  // Errors: CudaStatus("cudaStreamSynchronize").
  Status Synchronize() const;

 private:
  void Reset();
  cudaStream_t stream_ = nullptr;
  int device_ = -1;
};

// A CUDA event created with cudaEventDisableTiming (the cheapest kind: used only for ordering).
class CudaEvent {
 public:
  CudaEvent() = default;
  // Creates an event on the current device. Errors: CudaStatus("cudaEventCreateWithFlags");
  // NotSupported without the CUDA runtime.
  static Result<CudaEvent> Create();
  ~CudaEvent();
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const { return event_; }
  // Captures the work enqueued on `stream` so far (cudaEventRecord); `stream` may be nullptr,
  // the legacy default stream. Errors: CudaStatus("cudaEventRecord").
  Status Record(cudaStream_t stream);
  // Blocks the host until the captured work has completed. Errors:
  // CudaStatus("cudaEventSynchronize").
  Status Synchronize() const;
  // Returns true when the captured work has completed, false while it is pending.
  // Errors: CudaStatus("cudaEventQuery") for anything but cudaSuccess / cudaErrorNotReady.
  Result<bool> Query() const;

 private:
  void Reset();
  cudaEvent_t event_ = nullptr;
};

// `size()` bytes of device memory from cudaMalloc on the current device (256-byte aligned).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Allocates `bytes` (at least 1) on the current device. Errors: OutOfRange naming the size
  // when the device is out of memory; CudaStatus("cudaMalloc") otherwise; NotSupported without
  // the CUDA runtime.
  static Result<DeviceBuffer> Allocate(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }  // bytes

 private:
  void Reset();
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kiln

#endif  // KILN_READER_CUDA_HANDLES_H_
