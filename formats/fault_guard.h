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
//
// Library faults: a C library that would abort() on damaged input but first calls a hook
// (liblmdb's mdb_env_set_assert callback, formats/lmdb/lmdb_env.h) can call
// JumpToFaultScope(message) from that hook: control returns to the innermost armed scope as for
// a SIGBUS, with fault_message() set. The same rules apply to the frames it leaves (C code that
// holds no lock and owns no allocation at that point: the caller of the hook must guarantee it).
// Thread safety: scopes are per thread and nest.
#ifndef KILN_FORMATS_FAULT_GUARD_H_
#define KILN_FORMATS_FAULT_GUARD_H_

#include <csetjmp>

namespace kiln {

// Called by kiln's SIGBUS handler: jumps to the calling thread's innermost scope.
[[noreturn]] void HandleMappedReadFault(const void* address);

// Jumps to the calling thread's innermost armed scope, which then reports fault_message() ==
// `message` (copied, truncated to 255 bytes) and a null fault_address(). Returns, doing nothing,
// when the thread has no armed scope (the caller then does what it would have done without
// kiln, e.g. liblmdb aborts). Async-signal-safe; allocates nothing.
void JumpToFaultScope(const char* message);

class MappedReadFaultScope {
 public:
  MappedReadFaultScope();
  ~MappedReadFaultScope();
  MappedReadFaultScope(const MappedReadFaultScope&) = delete;
  MappedReadFaultScope& operator=(const MappedReadFaultScope&) = delete;

  // The address whose read faulted; valid after KILN_MAPPED_READ_FAULTED returned true. Null
  // for a library fault (JumpToFaultScope).
  const void* fault_address() const { return fault_address_; }
  // The library's message for a library fault (JumpToFaultScope); "" for a SIGBUS.
  const char* fault_message() const { return const_cast<const char*>(fault_message_); }

  sigjmp_buf env;  // set by KILN_MAPPED_READ_FAULTED

 private:
  friend void HandleMappedReadFault(const void* address);
  friend void JumpToFaultScope(const char* message);
  MappedReadFaultScope* outer_;
  const void* volatile fault_address_ = nullptr;
  volatile char fault_message_[256] = {};
};

}  // namespace kiln

// True when a read inside `scope` faulted (control returns here a second time).
#define KILN_MAPPED_READ_FAULTED(scope) (sigsetjmp((scope).env, 0) != 0)

#endif  // KILN_FORMATS_FAULT_GUARD_H_
