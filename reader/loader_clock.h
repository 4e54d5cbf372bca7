// The clocks the Loader's parts time themselves with (LoaderStats): a monotonic clock and the
// calling thread's CPU time, both in nanoseconds. Internal to reader/. Thread safety: any thread.
#ifndef KILN_READER_LOADER_CLOCK_H_
#define KILN_READER_LOADER_CLOCK_H_

#include <time.h>

#include <chrono>
#include <cstdint>

namespace kiln {

// Nanoseconds of the steady clock since its epoch.
inline uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// CPU time of the calling thread in nanoseconds (a vDSO-less syscall on some kernels: call it
// per chunk, not per sample).
inline uint64_t ThreadCpuNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace kiln

#endif  // KILN_READER_LOADER_CLOCK_H_
