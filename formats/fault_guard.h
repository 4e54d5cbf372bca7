// kiln::MappedReadFaultScope: turns a SIGBUS raised while reading a memory-mapped file into an
// error instead of a dead process.
//
// A mapped file that another process truncates (or storage that fails, say an NFS server going
// away) raises SIGBUS on the next read of a lost page; unhandled, the whole training process dies
// with "Bus error" and no message (field case B27). kiln installs, once per process, a SIGBUS
// handler that jumps back to the innermost MappedReadFaultScope of the faulting thread; a SIGBUS
// on a thread with no armed scope is handed to the previous handler (by default: the process
// dies as before, with a core dump).
//
// Usage (the sigsetjmp call must sit in the frame that stays active while reading):
//
//   MappedReadFaultScope scope;
//   volatile uint64_t current = 0;   // anything read after a fault must be volatile
//   if (KILN_MAPPED_READ_FAULTED(scope)) return Status::IOError(... name the file ...);
//   ... reads of mapped memory ...
//
// Rules: between arming and the end of the scope, code must not allocate, lock mutexes or
// otherwise leave state half-changed if a read faults (copies, hashing and zstd decompression
// into caller-owned buffers are fine). The jump skips the destructors of objects built in the
// frames it leaves: formally undefined behaviour in C++, harmless here because a fault can only
// happen inside a read of mapped bytes, where those frames hold no live objects that own
// resources (an empty std::string at most). Only SIGBUS is handled; SIGSEGV still means a bug.
// Thread safety: scopes are per thread and nest.
#ifndef KILN_FORMATS_FAULT_GUARD_H_
#define KILN_FORMATS_FAULT_GUARD_H_

#include <csetjmp>

namespace kiln {

// Called by kiln's SIGBUS handler: jumps to the calling thread's innermost scope.
[[noreturn]] void HandleMappedReadFault(const void* address);

class MappedReadFaultScope {
 public:
  MappedReadFaultScope();
  ~MappedReadFaultScope();
  MappedReadFaultScope(const MappedReadFaultScope&) = delete;
  MappedReadFaultScope& operator=(const MappedReadFaultScope&) = delete;

  // The address whose read faulted; valid after KILN_MAPPED_READ_FAULTED returned true.
  const void* fault_address() const { return fault_address_; }

  sigjmp_buf env;  // set by KILN_MAPPED_READ_FAULTED

 private:
  friend void HandleMappedReadFault(const void* address);
  MappedReadFaultScope* outer_;
  const void* volatile fault_address_ = nullptr;
};

}  // namespace kiln

// True when a read inside `scope` faulted (control returns here a second time).
#define KILN_MAPPED_READ_FAULTED(scope) (sigsetjmp((scope).env, 0) != 0)

#endif  // KILN_FORMATS_FAULT_GUARD_H_
