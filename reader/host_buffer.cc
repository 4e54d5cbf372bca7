#include "reader/host_buffer.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "reader/cuda_handles.h"

#ifdef KILN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kiln {

namespace {
constexpr size_t kPageBytes = 4096;
}

bool CudaDeviceAvailable(std::string* reason) {
  static std::once_flag once;
  static bool available = false;
  static std::string why;
  std::call_once(once, [] {
#ifdef KILN_HAVE_CUDA
    why = CudaUnavailableReason();
    available = why.empty();
#else
    why = "kiln was built without the CUDA runtime";
#endif
  });
  if (reason != nullptr) *reason = why;
  return available;
}

Result<std::unique_ptr<HostBuffer>> HostBuffer::Allocate(size_t bytes, bool pinned, int device) {
  std::unique_ptr<HostBuffer> buffer(new HostBuffer());
  const size_t size = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  buffer->size_ = size;
  if (pinned) {
    std::string reason;
    if (CudaDeviceAvailable(&reason)) {
#ifdef KILN_HAVE_CUDA
      std::unique_ptr<CudaDeviceGuard> guard;
      if (device >= 0) guard = std::make_unique<CudaDeviceGuard>(device);
      void* p = nullptr;
      const cudaError_t err =
          cudaHostAlloc(&p, size == 0 ? kPageBytes : size, cudaHostAllocDefault);
      if (err == cudaSuccess) {
        buffer->data_ = static_cast<uint8_t*>(p);
        buffer->pinned_ = true;
        return buffer;
      }
      reason = std::string("cudaHostAlloc(") + std::to_string(size) +
               " bytes): " + cudaGetErrorString(err);
#endif
    }
    buffer->fallback_reason_ = reason;
  }
  void* p = nullptr;
  if (posix_memalign(&p, kPageBytes, size == 0 ? kPageBytes : size) != 0) {
    return Status::OutOfRange("cannot allocate " + std::to_string(size) +
                              " bytes of page-aligned host memory for batch slots");
  }
  std::memset(p, 0, size);  // Touch the pages now, not during the first epoch.
  buffer->data_ = static_cast<uint8_t*>(p);
  return buffer;
}

HostBuffer::~HostBuffer() {
  if (data_ == nullptr) return;
#ifdef KILN_HAVE_CUDA
  if (pinned_) {
    cudaFreeHost(data_);  // Its error at process exit (driver shut down) is harmless.
    return;
  }
#endif
  std::free(data_);
}

}  // namespace kiln
