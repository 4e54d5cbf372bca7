// CudaDeviceOps: DeviceOps on the CUDA runtime (see reader/device_ops.h).
#include "reader/device_ops.h"

#include <string>

#ifdef KILN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kiln {

namespace {

#ifdef KILN_HAVE_CUDA

class CudaScope : public DeviceOps::Scope {
 public:
  explicit CudaScope(int device) : guard_(device) {}
  const Status& status() const { return guard_.status(); }

 private:
  CudaDeviceGuard guard_;
};

class RealCudaOps : public DeviceOps {
 public:
  Result<std::unique_ptr<Scope>> EnterDevice(int device) override {
    auto scope = std::make_unique<CudaScope>(device);
    KILN_RETURN_IF_ERROR(scope->status());
    return std::unique_ptr<Scope>(std::move(scope));
  }
  Result<cudaStream_t> CreateStream() override {
    cudaStream_t s = nullptr;
    KILN_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                                    "cudaStreamCreateWithFlags"));
    return s;
  }
  void DestroyStream(cudaStream_t stream) override { (void)cudaStreamDestroy(stream); }
  Result<cudaEvent_t> CreateEvent() override {
    cudaEvent_t e = nullptr;
    // Blocking sync: a host wait sleeps instead of spinning a core the fetch threads need.
    KILN_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync),
                   "cudaEventCreateWithFlags"));
    return e;
  }
  void DestroyEvent(cudaEvent_t event) override { (void)cudaEventDestroy(event); }
  Result<void*> Allocate(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // kiln's own failed call: not left for the caller to see
      return Status::OutOfRange("cudaMalloc: cannot allocate " + std::to_string(bytes) +
                                " bytes of device memory for batch slots (out of memory)");
    }
    KILN_RETURN_IF_ERROR(CudaStatus(err, "cudaMalloc"));
    return p;
  }
  void Free(void* device_memory) override { (void)cudaFree(device_memory); }
  Status CopyToDevice(void* dst, const void* src, size_t bytes, cudaStream_t stream) override {
    return CudaCopyToDeviceAsync(dst, src, bytes, stream);
  }
  Status Record(cudaEvent_t event, cudaStream_t stream) override {
    return CudaStatus(cudaEventRecord(event, stream), "cudaEventRecord");
  }
  Status StreamWaitEvent(cudaStream_t stream, cudaEvent_t event) override {
    return CudaStreamWaitEvent(stream, event);
  }
  Status EventSynchronize(cudaEvent_t event) override {
    return CudaStatus(cudaEventSynchronize(event), "cudaEventSynchronize");
  }
  Status StreamSynchronize(cudaStream_t stream) override { return CudaStreamSynchronize(stream); }
};

#else  // !KILN_HAVE_CUDA

class RealCudaOps : public DeviceOps {
  static Status No(const char* call) {
    return Status::NotSupported(std::string(call) + ": kiln was built without the CUDA runtime");
  }

 public:
  Result<std::unique_ptr<Scope>> EnterDevice(int) override { return No("cudaSetDevice"); }
  Result<cudaStream_t> CreateStream() override { return No("cudaStreamCreateWithFlags"); }
  void DestroyStream(cudaStream_t) override {}
  Result<cudaEvent_t> CreateEvent() override { return No("cudaEventCreateWithFlags"); }
  void DestroyEvent(cudaEvent_t) override {}
  Result<void*> Allocate(size_t) override { return No("cudaMalloc"); }
  void Free(void*) override {}
  Status CopyToDevice(void*, const void*, size_t, cudaStream_t) override {
    return No("cudaMemcpyAsync");
  }
  Status Record(cudaEvent_t, cudaStream_t) override { return No("cudaEventRecord"); }
  Status StreamWaitEvent(cudaStream_t, cudaEvent_t) override { return No("cudaStreamWaitEvent"); }
  Status EventSynchronize(cudaEvent_t) override { return No("cudaEventSynchronize"); }
  Status StreamSynchronize(cudaStream_t) override { return No("cudaStreamSynchronize"); }
};

#endif  // KILN_HAVE_CUDA

}  // namespace

std::shared_ptr<DeviceOps> CudaDeviceOps() {
  static const std::shared_ptr<DeviceOps> ops = std::make_shared<RealCudaOps>();
  return ops;
}

}  // namespace kiln
