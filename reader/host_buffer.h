// kiln::HostBuffer: one block of host memory for batch slots, allocated once.
//
// Pinned (page-locked, cudaHostAlloc) when kiln was built with the CUDA runtime, pinning was
// asked for and a CUDA device is present: the GPU's copy engine can then read it directly and
// cudaMemcpyAsync overlaps with compute. Otherwise page-aligned (4096-byte) ordinary memory.
// Ownership: the buffer frees its memory on destruction (cudaFreeHost or free).
// Thread safety: immutable after construction; data() may be written from many threads on
// disjoint ranges.
#ifndef KILN_READER_HOST_BUFFER_H_
#define KILN_READER_HOST_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "formats/status.h"

namespace kiln {

class HostBuffer {
 public:
  // Allocates `bytes` (rounded up to a 4096-byte multiple). With `pinned` true, tries pinned
  // memory first and falls back to page-aligned memory when no CUDA device or runtime is there
  // (fallback_reason() then says why). Errors: OutOfRange naming the size when memory is short.
  // `device` >= 0: the CUDA device made current (CudaDeviceGuard) while the pinned memory is
  // allocated, so the allocation creates no context on another device (the memory is usable
  // from every device either way, under unified addressing); -1: the current device.
  static Result<std::unique_ptr<HostBuffer>> Allocate(size_t bytes, bool pinned, int device = -1);
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }  // bytes
  bool pinned() const { return pinned_; }
  // Why pinned memory was asked for and not used; empty when pinned or not asked for.
  const std::string& fallback_reason() const { return fallback_reason_; }

 private:
  HostBuffer() = default;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool pinned_ = false;
  std::string fallback_reason_;
};

// Returns true when this build has the CUDA runtime and at least one CUDA device is usable.
// `reason` (optional) receives why not. The answer is computed once per process.
bool CudaDeviceAvailable(std::string* reason = nullptr);

}  // namespace kiln

#endif  // KILN_READER_HOST_BUFFER_H_
