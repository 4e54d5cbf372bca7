// kiln::PartLock: at most one process writes a given part of a partitioned pack.
//
// The lock is `flock(LOCK_EX | LOCK_NB)` on a lock file beside the part
// (`OUT.parts/part-IIIII-of-NNNNN.lock`), held for the whole run and released by the kernel when
// the process ends, however it ends (a SIGKILLed part can be resumed at once). The holder writes
// "host H pid P since T" into the file, so that a second attempt can say who holds it. The lock
// file is left in place afterwards (removing it would let two later writers lock two different
// files); `kiln merge` removes the lock files of the parts it joined.
//
// Limits: flock works between processes on one machine and, on shared file systems, only where
// the file system passes it on: NFS v4 (and v3 with lockd), Lustre mounted with `flock`, CephFS,
// GPFS. On a file system that ignores it, two writers of one part are not stopped.
// Thread safety: a PartLock is owned by one thread; distinct locks are independent.
#ifndef KILN_TOOLS_PART_LOCK_H_
#define KILN_TOOLS_PART_LOCK_H_

#include <memory>
#include <string>

#include "formats/status.h"

namespace kiln {

class PartLock {
 public:
  // Creates (if missing) and locks `path`; `what` names the part in messages ("part 2 of 4").
  // Errors: IOError "<what> is being written by another process (host H pid P since T; lock
  // PATH)" when it is held, or naming the path when it cannot be created.
  static Result<std::unique_ptr<PartLock>> Acquire(const std::string& path,
                                                   const std::string& what);
  // Returns OK when nobody holds the lock file `path` now (or it does not exist), else the same
  // IOError as Acquire. Takes and releases the lock at once.
  static Status CheckFree(const std::string& path, const std::string& what);
  ~PartLock();  // releases the lock
  PartLock(const PartLock&) = delete;
  PartLock& operator=(const PartLock&) = delete;

 private:
  explicit PartLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace kiln

#endif  // KILN_TOOLS_PART_LOCK_H_
