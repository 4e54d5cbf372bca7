#include "reader/cuda_handles.h"

#include <string>
#include <utility>

#ifdef KILN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kiln {

#ifdef KILN_HAVE_CUDA

bool CudaRuntimeAvailable() { return true; }

Status CudaStatus(int error, const char* call) {
  if (error == cudaSuccess) return Status::Ok();
  const cudaError_t err = static_cast<cudaError_t>(error);
  std::string msg =
      std::string(call) + ": " + cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + ")";
  switch (err) {
    case cudaErrorMemoryAllocation:
      return Status::OutOfRange(std::move(msg));
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return Status::NotSupported(std::move(msg) + ": " + CudaUnavailableReason());
    default:
      return Status::Internal(std::move(msg));
  }
}

Status CudaCheckDevice(int device) {
  int count = 0;
  KILN_RETURN_IF_ERROR(CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount"));
  if (device < 0 || device >= count) {
    return Status::InvalidArgument("device " + std::to_string(device) + ": no such CUDA device (" +
                                   std::to_string(count) + " devices)");
  }
  return Status::Ok();
}

Status CudaSetDevice(int device) {
  int count = 0;
  KILN_RETURN_IF_ERROR(CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount"));
  if (device < 0 || device >= count) {
    return Status::InvalidArgument("CUDA device " + std::to_string(device) + " does not exist (" +
                                   std::to_string(count) + " devices)");
  }
  return CudaStatus(cudaSetDevice(device), "cudaSetDevice");
}

std::string CudaUnavailableReason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess) return count > 0 ? std::string() : std::string("no CUDA device found");
  (void)cudaGetLastError();
  auto version = [](int v) {
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  int driver = 0;
  (void)cudaDriverGetVersion(&driver);  // 0 when no driver is loadable
  if (err == cudaErrorInsufficientDriver && driver == 0) {
    return "no NVIDIA driver/GPU found (libcuda.so.1 cannot be loaded)";
  }
  if (err == cudaErrorNoDevice) return "no NVIDIA GPU found (cudaErrorNoDevice)";
  if (err == cudaErrorInsufficientDriver) {
    return "the NVIDIA driver supports CUDA " + version(driver) +
           ", older than kiln's CUDA runtime " + version(CUDART_VERSION) +
           " (cudaErrorInsufficientDriver)";
  }
  return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err) + " (" +
         cudaGetErrorName(err) + ")";
}

bool CudaPrimaryContextActive(int device) {
  using GetState = int (*)(int, unsigned int*, int*);  // cuDevicePrimaryCtxGetState
  static GetState get_state = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &fn, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<GetState>(nullptr);
    }
    return reinterpret_cast<GetState>(fn);
  }();
  if (get_state == nullptr || device < 0) return false;
  unsigned int flags = 0;
  int active = 0;
  return get_state(device, &flags, &active) == 0 && active != 0;
}

CudaDeviceGuard::CudaDeviceGuard(int device) {
  int current = -1;
  status_ = CudaStatus(cudaGetDevice(&current), "cudaGetDevice");
  if (!status_.ok() || current == device) return;
  previous_ = current;
  status_ = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  changed_ = status_.ok();
}

CudaDeviceGuard::~CudaDeviceGuard() {
  if (changed_ && CudaPrimaryContextActive(previous_)) (void)cudaSetDevice(previous_);
}

Status CudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event) {
  return CudaStatus(cudaStreamWaitEvent(stream, event, 0), "cudaStreamWaitEvent");
}

Status CudaStreamSynchronize(cudaStream_t stream) {
  return CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

Status CudaCopyToDeviceAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream),
                    "cudaMemcpyAsync");
}

Status CudaCopyDeviceToDeviceAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
                    "cudaMemcpyAsync");
}

Status CudaCopyToHostAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream),
                    "cudaMemcpyAsync");
}

// Destructors ignore every error: cudaErrorCudartUnloading at process exit is expected, and a
// destructor has no one to report to.

Result<CudaStream> CudaStream::Create(int device) {
  KILN_RETURN_IF_ERROR(CudaSetDevice(device));
  CudaStream s;
  KILN_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&s.stream_, cudaStreamNonBlocking),
                                  "cudaStreamCreateWithFlags"));
  s.device_ = device;
  return s;
}

void CudaStream::Reset() {
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  stream_ = nullptr;
  device_ = -1;
}

Status CudaStream::Synchronize() const {
  return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

Result<CudaEvent> CudaEvent::Create() {
  CudaEvent e;
  KILN_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&e.event_, cudaEventDisableTiming),
                                  "cudaEventCreateWithFlags"));
  return e;
}

void CudaEvent::Reset() {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);
  event_ = nullptr;
}

Status CudaEvent::Record(cudaStream_t stream) {
  return CudaStatus(cudaEventRecord(event_, stream), "cudaEventRecord");
}

Status CudaEvent::Synchronize() const {
  return CudaStatus(cudaEventSynchronize(event_), "cudaEventSynchronize");
}

Result<bool> CudaEvent::Query() const {
  const cudaError_t err = cudaEventQuery(event_);
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) return false;  // not an error, and not recorded as one
  return CudaStatus(err, "cudaEventQuery");
}

Result<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  DeviceBuffer b;
  const size_t size = bytes == 0 ? 1 : bytes;
  const cudaError_t err = cudaMalloc(&b.data_, size);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // kiln's own failed call: clear it so later calls don't see it
    return Status::OutOfRange("cudaMalloc: cannot allocate " + std::to_string(size) +
                              " bytes of device memory (out of memory)");
  }
  KILN_RETURN_IF_ERROR(CudaStatus(err, "cudaMalloc"));
  b.size_ = size;
  return b;
}

void DeviceBuffer::Reset() {
  if (data_ != nullptr) (void)cudaFree(data_);
  data_ = nullptr;
  size_ = 0;
}

#else  // !KILN_HAVE_CUDA: every entry point says NotSupported.

namespace {
Status NoCuda(const char* call) {
  return Status::NotSupported(std::string(call) + ": kiln was built without the CUDA runtime");
}
}  // namespace

bool CudaRuntimeAvailable() { return false; }
std::string CudaUnavailableReason() { return "kiln was built without the CUDA runtime"; }
bool CudaPrimaryContextActive(int) { return false; }
CudaDeviceGuard::CudaDeviceGuard(int) : status_(NoCuda("cudaSetDevice")) {}
CudaDeviceGuard::~CudaDeviceGuard() = default;
Status CudaStatus(int error, const char* call) { return error == 0 ? Status::Ok() : NoCuda(call); }
Status CudaSetDevice(int) { return NoCuda("cudaSetDevice"); }
Status CudaCheckDevice(int) { return NoCuda("cudaGetDeviceCount"); }
Status CudaStreamWaitEvent(cudaStream_t, cudaEvent_t) { return NoCuda("cudaStreamWaitEvent"); }
Status CudaStreamSynchronize(cudaStream_t) { return NoCuda("cudaStreamSynchronize"); }
Status CudaCopyToDeviceAsync(void*, const void*, size_t, cudaStream_t) {
  return NoCuda("cudaMemcpyAsync");
}
Status CudaCopyToHostAsync(void*, const void*, size_t, cudaStream_t) {
  return NoCuda("cudaMemcpyAsync");
}
Status CudaCopyDeviceToDeviceAsync(void*, const void*, size_t, cudaStream_t) {
  return NoCuda("cudaMemcpyAsync");
}
Result<CudaStream> CudaStream::Create(int) { return NoCuda("cudaStreamCreateWithFlags"); }
void CudaStream::Reset() {
  stream_ = nullptr;
  device_ = -1;
}
Status CudaStream::Synchronize() const { return NoCuda("cudaStreamSynchronize"); }
Result<CudaEvent> CudaEvent::Create() { return NoCuda("cudaEventCreateWithFlags"); }
void CudaEvent::Reset() { event_ = nullptr; }
Status CudaEvent::Record(cudaStream_t) { return NoCuda("cudaEventRecord"); }
Status CudaEvent::Synchronize() const { return NoCuda("cudaEventSynchronize"); }
Result<bool> CudaEvent::Query() const { return NoCuda("cudaEventQuery"); }
Result<DeviceBuffer> DeviceBuffer::Allocate(size_t) { return NoCuda("cudaMalloc"); }
void DeviceBuffer::Reset() {
  data_ = nullptr;
  size_ = 0;
}

#endif  // KILN_HAVE_CUDA

// Moves and destructors are the same in both builds.

CudaStream::~CudaStream() { Reset(); }
CudaStream::CudaStream(CudaStream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), device_(std::exchange(other.device_, -1)) {}
CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    Reset();
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

CudaEvent::~CudaEvent() { Reset(); }
CudaEvent::CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    Reset();
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { Reset(); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace kiln
